/*
 * clockshift.c: a test tool, preloaded into a server (LD_PRELOAD) to step
 * its wall clock. It offsets what gettimeofday, clock_gettime(CLOCK_REALTIME)
 * and time return by a number of nanoseconds read from the file named by
 * CLOCKSHIFT_FILE (a signed decimal; a missing or empty file is 0). The file
 * is read again at most every 20 ms, so a test steps the clock by writing
 * it. Monotonic clocks are left alone, as an NTP step leaves them.
 *
 * It also stops the clock: when CLOCKSHIFT_AT_FILE names a file that holds
 * a positive decimal, the wall clock reads exactly that many nanoseconds
 * since the epoch (the shift is then ignored). That file is mapped into
 * memory, so a write to it takes effect at once: a test sets the instant,
 * then sends a command, and every clock the server reads (its cached
 * command time, TIME, a script's TIME) is that instant. The test writes it
 * in place and never shortens it (a mapped file cut short faults).
 *
 * It allocates nothing and calls no stdio, so it is safe inside malloc
 * (jemalloc) and signal handlers.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <fcntl.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

typedef int (*clock_gettime_fn)(clockid_t, struct timespec *);

static clock_gettime_fn real_clock_gettime(void) {
    static clock_gettime_fn fn;
    if (fn == NULL) fn = (clock_gettime_fn)dlsym(RTLD_NEXT, "clock_gettime");
    return fn;
}

/* The offset in nanoseconds, read from the file at most every 20 ms. */
static long long shift_ns(void) {
    static long long shift, read_at = -1;
    struct timespec mono;
    if (real_clock_gettime()(CLOCK_MONOTONIC, &mono) != 0) return shift;
    long long now = (long long)mono.tv_sec * 1000000000LL + mono.tv_nsec;
    if (read_at >= 0 && now - read_at < 20000000LL) return shift;
    read_at = now;
    const char *path = getenv("CLOCKSHIFT_FILE");
    if (path == NULL) return shift = 0;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return shift = 0;
    char buf[32];
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    long long v = 0;
    int neg = 0, i = 0;
    if (n > 0 && (buf[0] == '-' || buf[0] == '+')) neg = buf[i++] == '-';
    for (; i < n && buf[i] >= '0' && buf[i] <= '9'; i++) v = v * 10 + (buf[i] - '0');
    return shift = neg ? -v : v;
}

/* The stopped clock's instant in nanoseconds, or 0 when it runs. */
static long long stopped_at(void) {
    static const volatile char *map;
    static int tried;
    if (!tried) {
        tried = 1;
        const char *path = getenv("CLOCKSHIFT_AT_FILE");
        int fd = path ? open(path, O_RDONLY | O_CLOEXEC) : -1;
        if (fd >= 0) {
            void *p = mmap(NULL, 32, PROT_READ, MAP_SHARED, fd, 0);
            close(fd);
            if (p != MAP_FAILED) map = p;
        }
    }
    if (map == NULL) return 0;
    for (;;) { /* read until two reads agree: never a half-written value */
        long long a = 0, b = 0;
        for (int i = 0; i < 24 && map[i] >= '0' && map[i] <= '9'; i++) a = a * 10 + (map[i] - '0');
        for (int i = 0; i < 24 && map[i] >= '0' && map[i] <= '9'; i++) b = b * 10 + (map[i] - '0');
        if (a == b) return a;
    }
}

static void shifted(struct timespec *ts) {
    long long at = stopped_at();
    if (at > 0) {
        ts->tv_sec = at / 1000000000LL;
        ts->tv_nsec = at % 1000000000LL;
        return;
    }
    long long ns = (long long)ts->tv_sec * 1000000000LL + ts->tv_nsec + shift_ns();
    ts->tv_sec = ns / 1000000000LL;
    ts->tv_nsec = ns % 1000000000LL;
    if (ts->tv_nsec < 0) {
        ts->tv_nsec += 1000000000LL;
        ts->tv_sec--;
    }
}

int clock_gettime(clockid_t id, struct timespec *ts) {
    int r = real_clock_gettime()(id, ts);
    if (r == 0 && (id == CLOCK_REALTIME || id == CLOCK_REALTIME_COARSE)) shifted(ts);
    return r;
}

int gettimeofday(struct timeval *restrict tv, void *restrict tz) {
    struct timespec ts;
    (void)tz;
    if (clock_gettime(CLOCK_REALTIME, &ts) != 0) return -1;
    tv->tv_sec = ts.tv_sec;
    tv->tv_usec = ts.tv_nsec / 1000;
    return 0;
}

time_t time(time_t *out) {
    struct timespec ts;
    if (clock_gettime(CLOCK_REALTIME, &ts) != 0) return (time_t)-1;
    if (out) *out = ts.tv_sec;
    return ts.tv_sec;
}
