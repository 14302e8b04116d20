//! Credentials, region and endpoint from the shared AWS files, as S3
//! clients read them: the profile `AWS_PROFILE` names (else `default`) in
//! the credentials file (`AWS_SHARED_CREDENTIALS_FILE`, else
//! `~/.aws/credentials`: sections `[NAME]`) and the config file
//! (`AWS_CONFIG_FILE`, else `~/.aws/config`: `[profile NAME]`, and
//! `[default]`). The environment's own variables win over a profile's, as
//! they do for the AWS CLI. Nothing read here is written anywhere.

use std::collections::BTreeMap;
use std::path::PathBuf;

/// The settings a profile gives, by the key the files use
/// (`aws_access_key_id`, `aws_secret_access_key`, `aws_session_token`,
/// `region`, `endpoint_url`).
pub type Settings = BTreeMap<String, String>;

/// The keys read, and the environment variable that overrides each.
pub const KEYS: [(&str, &str); 5] = [
    ("aws_access_key_id", "AWS_ACCESS_KEY_ID"),
    ("aws_secret_access_key", "AWS_SECRET_ACCESS_KEY"),
    ("aws_session_token", "AWS_SESSION_TOKEN"),
    ("region", "AWS_REGION"),
    ("endpoint_url", "AWS_ENDPOINT_URL"),
];

/// The named profile's settings from the two files (the credentials
/// file's win for a key both give); empty when neither has it.
pub fn load(env: impl Fn(&str) -> Option<String>) -> Settings {
    let name = env("AWS_PROFILE").filter(|p| !p.is_empty()).unwrap_or_else(|| "default".into());
    let home = env("HOME").map(PathBuf::from);
    let file =
        |var: &str, default: &str| env(var).map(PathBuf::from).or_else(|| home.as_ref().map(|h| h.join(default)));
    let mut settings = Settings::new();
    if let Some(config) = file("AWS_CONFIG_FILE", ".aws/config") {
        let section = if name == "default" { "default".to_string() } else { format!("profile {name}") };
        settings.extend(section_of(&std::fs::read_to_string(config).unwrap_or_default(), &section));
    }
    if let Some(credentials) = file("AWS_SHARED_CREDENTIALS_FILE", ".aws/credentials") {
        settings.extend(section_of(&std::fs::read_to_string(credentials).unwrap_or_default(), &name));
    }
    settings.retain(|k, _| KEYS.iter().any(|(key, _)| key == k));
    settings
}

/// The `key = value` lines of `[section]` in an INI text (comments `#`
/// and `;`, keys in any case, blanks around names and values ignored).
fn section_of(text: &str, section: &str) -> Settings {
    let mut inside = false;
    let mut out = Settings::new();
    for line in text.lines().map(str::trim) {
        if line.is_empty() || line.starts_with('#') || line.starts_with(';') {
            continue;
        }
        if let Some(name) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
            inside = name.split_whitespace().collect::<Vec<_>>().join(" ") == section;
            continue;
        }
        if let (true, Some((k, v))) = (inside, line.split_once('=')) {
            out.insert(k.trim().to_ascii_lowercase(), v.trim().to_string());
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_profile_is_read_from_both_files_and_the_credentials_file_wins() {
        let dir = tempfile::tempdir().unwrap();
        let aws = dir.path().join(".aws");
        std::fs::create_dir(&aws).unwrap();
        std::fs::write(
            aws.join("credentials"),
            "[default]\naws_access_key_id = DEF\naws_secret_access_key = defsecret\n\n\
             # team\n[team]\nAWS_ACCESS_KEY_ID=TEAM\naws_secret_access_key = teamsecret\nregion = from-credentials\n",
        )
        .unwrap();
        std::fs::write(
            aws.join("config"),
            "[default]\nregion = eu-west-1\n[profile team]\nregion = garage\nendpoint_url = http://127.0.0.1:3900\n\
             output = json\n[profile  other]\nregion = x\n",
        )
        .unwrap();
        let home = dir.path().to_str().unwrap().to_string();
        let env = |profile: Option<&'static str>| {
            let home = home.clone();
            move |k: &str| match k {
                "HOME" => Some(home.clone()),
                "AWS_PROFILE" => profile.map(String::from),
                _ => None,
            }
        };
        let default = load(env(None));
        assert_eq!(default.get("aws_access_key_id").map(String::as_str), Some("DEF"));
        assert_eq!(default.get("region").map(String::as_str), Some("eu-west-1"));
        let team = load(env(Some("team")));
        assert_eq!(team.get("aws_access_key_id").map(String::as_str), Some("TEAM"), "keys in any case");
        assert_eq!(team.get("region").map(String::as_str), Some("from-credentials"), "the credentials file wins");
        assert_eq!(team.get("endpoint_url").map(String::as_str), Some("http://127.0.0.1:3900"));
        assert!(!team.contains_key("output"), "only the keys an S3 client needs");
        assert_eq!(load(env(Some("other"))).get("region").map(String::as_str), Some("x"));
        assert!(load(env(Some("absent"))).is_empty());
        // Files named by the environment instead of HOME's.
        let named = |k: &str| match k {
            "AWS_SHARED_CREDENTIALS_FILE" => Some(aws.join("credentials").to_str().unwrap().to_string()),
            "AWS_CONFIG_FILE" => Some(aws.join("config").to_str().unwrap().to_string()),
            "AWS_PROFILE" => Some("team".into()),
            _ => None,
        };
        assert_eq!(load(named).get("endpoint_url").map(String::as_str), Some("http://127.0.0.1:3900"));
    }
}
