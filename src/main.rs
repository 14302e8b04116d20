fn main() {
    env_logger::init();
}
