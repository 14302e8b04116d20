/* Small-file metadata benchmark helper for tests/bench/bench.py.
 *
 *   smallfiles PHASE DIR N [SIZE]
 *
 * PHASE is one of create, stat, rename, delete; the phases are meant to be
 * run in that order on the same DIR (the driver drops caches between them).
 *   create: open(O_CREAT|O_EXCL|O_WRONLY) f<i>, write SIZE bytes, close
 *   stat:   stat f<i>
 *   rename: rename f<i> -> g<i> (same directory)
 *   delete: unlink g<i>
 * Files are spread over N/1000 subdirectories d<k> (created by `create`,
 * removed by `delete`), so no directory is pathologically large.
 * Prints the elapsed wall time of the phase in seconds (monotonic clock),
 * excluding process start-up. Exits non-zero on the first error.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define PER_DIR 1000

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

static void die(const char *what, const char *path) {
    fprintf(stderr, "smallfiles: %s %s: %s\n", what, path, strerror(errno));
    exit(1);
}

int main(int argc, char **argv) {
    if (argc < 4) {
        fprintf(stderr, "usage: smallfiles create|stat|rename|delete DIR N [SIZE]\n");
        return 2;
    }
    const char *phase = argv[1], *dir = argv[2];
    long n = atol(argv[3]);
    long size = argc > 4 ? atol(argv[4]) : 100;
    long ndirs = (n + PER_DIR - 1) / PER_DIR;
    char buf[65536];
    if (size > (long)sizeof buf) size = sizeof buf;
    for (long i = 0; i < size; i++) buf[i] = 'a' + i % 26;
    char p[4096], q[4096];
    struct stat st;

    double t0 = now();
    if (!strcmp(phase, "create")) {
        for (long d = 0; d < ndirs; d++) {
            snprintf(p, sizeof p, "%s/d%ld", dir, d);
            if (mkdir(p, 0755)) die("mkdir", p);
        }
        for (long i = 0; i < n; i++) {
            snprintf(p, sizeof p, "%s/d%ld/f%ld", dir, i / PER_DIR, i);
            int fd = open(p, O_CREAT | O_EXCL | O_WRONLY | O_CLOEXEC, 0644);
            if (fd < 0) die("open", p);
            if (size > 0 && write(fd, buf, size) != size) die("write", p);
            if (close(fd)) die("close", p);
        }
    } else if (!strcmp(phase, "stat")) {
        for (long i = 0; i < n; i++) {
            snprintf(p, sizeof p, "%s/d%ld/f%ld", dir, i / PER_DIR, i);
            if (stat(p, &st)) die("stat", p);
            if (st.st_size != size) { errno = EINVAL; die("size mismatch", p); }
        }
    } else if (!strcmp(phase, "rename")) {
        for (long i = 0; i < n; i++) {
            snprintf(p, sizeof p, "%s/d%ld/f%ld", dir, i / PER_DIR, i);
            snprintf(q, sizeof q, "%s/d%ld/g%ld", dir, i / PER_DIR, i);
            if (rename(p, q)) die("rename", p);
        }
    } else if (!strcmp(phase, "delete")) {
        for (long i = 0; i < n; i++) {
            snprintf(p, sizeof p, "%s/d%ld/g%ld", dir, i / PER_DIR, i);
            if (unlink(p)) die("unlink", p);
        }
        for (long d = 0; d < ndirs; d++) {
            snprintf(p, sizeof p, "%s/d%ld", dir, d);
            if (rmdir(p)) die("rmdir", p);
        }
    } else {
        fprintf(stderr, "smallfiles: unknown phase %s\n", phase);
        return 2;
    }
    printf("%.6f\n", now() - t0);
    return 0;
}
