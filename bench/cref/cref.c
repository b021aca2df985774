/*
 * cref.c: GCRA.THROTTLE's server-side work written in C, as the benchmark's
 * reference for what the module API itself costs. It is not the product:
 * `make bench` builds it next to the module, loads both into one server and
 * measures CREF.GCRA beside GCRA.THROTTLE, so the gap between them is the
 * price of Go (the crossings, the runtime, the Go code), and the gap between
 * CREF.GCRA and INCR is the price of the module API.
 *
 * CREF.GCRA key max_burst count period makes the same server calls as
 * GCRA.THROTTLE on an admitted call, in the same order: open the key for
 * reading and writing, read its expiry and the stored TAT through DMA, size
 * and fill the value in place (StringTruncate + DMA), SetAbsExpire,
 * SignalModifiedKey, replicate SET key value PXAT ms, notify set and expire,
 * reply five integers. The arithmetic is
 * GCRA's in integer nanoseconds, with no overflow checks and no validation
 * beyond "is a number": enough to do the same work, not to be used.
 *
 * CREF.KEYS numkeys key [key ...] max_burst count period makes those calls
 * on each of several keys: the floor for RL.ALL over GCRA limits.
 *
 * Three more commands leave steps out, so that one run prices each step:
 * CREF.NOEXPIRE (no SetAbsExpire), CREF.NOREPL (no Replicate) and CREF.BARE
 * (open, read, write in place and a one-integer reply: the least any
 * command that updates a string key through the module API does).
 */
#include <stdlib.h>
#include <string.h>

#define RL_API_DEFINE /* this file owns the API pointers */
#include "rmapi.h" /* the API pointers, rl_load_api and rl_now_ns, as the module has them */

static RedisModuleString *cref_pxat;

/* Steps a variant leaves out. */
enum { CREF_NO_EXPIRE = 1, CREF_NO_REPLICATE = 2, CREF_BARE = 4 };

static int cref_int(RedisModuleString *s, long long *out) {
    size_t len;
    const char *p = RM_StringPtrLen(s, &len);
    char buf[24], *end;
    if (len == 0 || len >= sizeof buf) return 0;
    memcpy(buf, p, len);
    buf[len] = '\0';
    *out = strtoll(buf, &end, 10);
    return *end == '\0';
}

/* Writes v (0 or more) in decimal to buf, which holds 20 bytes; returns
 * the length. */
static int cref_format(char *buf, long long v) {
    char tmp[20];
    int n = 0;
    unsigned long long u = (unsigned long long)v;
    do {
        tmp[n++] = (char)('0' + u % 10);
        u /= 10;
    } while (u > 0);
    for (int i = 0; i < n; i++) buf[i] = tmp[n - 1 - i];
    return n;
}

/* cref_key makes GCRA.THROTTLE's server calls on one key and fills reply;
 * it returns 0, or replies an error and returns -1. */
static int cref_key(RedisModuleCtx *ctx, RedisModuleString *name, long long burst, long long count, long long period,
                    int skip, long long reply[5]) {
    RedisModuleKey *key = RM_OpenKey(ctx, name, REDISMODULE_READ | REDISMODULE_WRITE);
    long long now = rl_now_ns(), tat = now;
    int type = RM_KeyType(key);
    if (type == REDISMODULE_KEYTYPE_STRING) {
        /* GCRA.THROTTLE reads the expiry: a key without one is not state
         * (CREF.NOEXPIRE's keys have none, so it only reads it). */
        if (!(skip & CREF_BARE) && RM_GetAbsExpire(key) == REDISMODULE_NO_EXPIRE && !(skip & CREF_NO_EXPIRE)) {
            RM_CloseKey(key);
            RM_ReplyWithError(ctx, "ERR not limiter state");
            return -1;
        }
        size_t len;
        char *v = RM_StringDMA(key, &len, REDISMODULE_READ);
        char buf[24];
        if (len > 0 && len < sizeof buf) {
            memcpy(buf, v, len);
            buf[len] = '\0';
            long long stored = strtoll(buf, NULL, 10);
            if (stored > tat) tat = stored;
        }
    } else if (type != REDISMODULE_KEYTYPE_EMPTY) {
        RM_CloseKey(key);
        RM_ReplyWithError(ctx, REDISMODULE_ERRORMSG_WRONGTYPE);
        return -1;
    }

    long long interval = period * 1000000000LL / count;
    long long tolerance = interval * (burst + 1);
    long long next = tat + interval;
    long long allow_at = next - tolerance;
    long long limit = burst + 1;
    reply[0] = 0, reply[1] = limit, reply[2] = 0, reply[3] = -1, reply[4] = 0;
    if (now < allow_at) {
        reply[0] = 1;
        reply[3] = (allow_at - now) / 1000000000LL;
        reply[4] = (tat - now) / 1000000000LL;
    } else {
        long long left = (now - allow_at) / interval;
        reply[2] = left < 0 ? 0 : (left > limit ? limit : left);
        reply[4] = (next - now) / 1000000000LL;
        long long expire_ms = (next + 999999) / 1000000;
        char val[24];
        int n = cref_format(val, next);
        size_t len = 0;
        char *p = RM_StringTruncate(key, (size_t)n) == REDISMODULE_OK ? RM_StringDMA(key, &len, REDISMODULE_WRITE)
                                                                        : NULL;
        if (p == NULL || len != (size_t)n) {
            RM_CloseKey(key);
            RM_ReplyWithError(ctx, "ERR cannot write");
            return -1;
        }
        memcpy(p, val, len);
        if (!(skip & (CREF_NO_EXPIRE | CREF_BARE))) RM_SetAbsExpire(key, expire_ms);
        if (!(skip & CREF_BARE)) RM_SignalModifiedKey(ctx, name);
        if (!(skip & (CREF_NO_REPLICATE | CREF_BARE)))
            RM_Replicate(ctx, "SET", "sbsl", name, val, (size_t)n, cref_pxat, expire_ms);
        if (!(skip & CREF_BARE)) {
            RM_NotifyKeyspaceEvent(ctx, REDISMODULE_NOTIFY_STRING, "set", name);
            RM_NotifyKeyspaceEvent(ctx, REDISMODULE_NOTIFY_GENERIC, "expire", name);
        }
    }
    RM_CloseKey(key);
    return 0;
}

/* The arguments after the key(s): max_burst count period. */
static int cref_args(RedisModuleString **argv, long long *burst, long long *count, long long *period) {
    return cref_int(argv[0], burst) && cref_int(argv[1], count) && cref_int(argv[2], period) && *burst >= 0 &&
           *count >= 1 && *period >= 1;
}

static int cref_run(RedisModuleCtx *ctx, RedisModuleString **argv, int argc, int skip) {
    long long burst, count, period, reply[5];
    if (argc != 5) return RM_WrongArity(ctx);
    if (!cref_args(argv + 2, &burst, &count, &period)) return RM_ReplyWithError(ctx, "ERR bad argument");
    if (cref_key(ctx, argv[1], burst, count, period, skip, reply) != 0) return REDISMODULE_OK;
    if (skip & CREF_BARE) return RM_ReplyWithLongLong(ctx, reply[0]);
    RM_ReplyWithArray(ctx, 5);
    for (int i = 0; i < 5; i++) RM_ReplyWithLongLong(ctx, reply[i]);
    return REDISMODULE_OK;
}

/* CREF.KEYS numkeys key [key ...] max_burst count period: GCRA.THROTTLE's
 * server calls on each key in turn, replying the last key's five integers
 * and its position: the module API's floor for RL.ALL over GCRA limits
 * (with no all-or-nothing decision, no checks, no parsing of limiters). */
static int cref_keys(RedisModuleCtx *ctx, RedisModuleString **argv, int argc) {
    long long n, burst, count, period, reply[5];
    if (argc < 6 || !cref_int(argv[1], &n) || n < 1 || n > 16 || argc != 5 + n) return RM_WrongArity(ctx);
    if (!cref_args(argv + 2 + n, &burst, &count, &period)) return RM_ReplyWithError(ctx, "ERR bad argument");
    for (long long i = 0; i < n; i++)
        if (cref_key(ctx, argv[2 + i], burst, count, period, 0, reply) != 0) return REDISMODULE_OK;
    RM_ReplyWithArray(ctx, 6);
    for (int i = 0; i < 5; i++) RM_ReplyWithLongLong(ctx, reply[i]);
    RM_ReplyWithLongLong(ctx, n - 1);
    return REDISMODULE_OK;
}

static int cref_gcra(RedisModuleCtx *ctx, RedisModuleString **argv, int argc) {
    return cref_run(ctx, argv, argc, 0);
}
static int cref_noexpire(RedisModuleCtx *ctx, RedisModuleString **argv, int argc) {
    return cref_run(ctx, argv, argc, CREF_NO_EXPIRE);
}
static int cref_norepl(RedisModuleCtx *ctx, RedisModuleString **argv, int argc) {
    return cref_run(ctx, argv, argc, CREF_NO_REPLICATE);
}
static int cref_bare(RedisModuleCtx *ctx, RedisModuleString **argv, int argc) {
    return cref_run(ctx, argv, argc, CREF_BARE);
}

int RedisModule_OnLoad(RedisModuleCtx *ctx, RedisModuleString **argv, int argc) {
    (void)argv;
    (void)argc;
    if (rl_load_api(ctx) != NULL) return REDISMODULE_ERR;
    RM_SetModuleAttribs(ctx, "cref", 1, REDISMODULE_APIVER_1);
    RM_SetModuleOptions(ctx, REDISMODULE_OPTION_NO_IMPLICIT_SIGNAL_MODIFIED);
    cref_pxat = RM_CreateString(NULL, "PXAT", 4);
    static const struct {
        const char *name;
        RedisModuleCmdFunc fn;
    } cmds[] = {{"cref.gcra", cref_gcra},
                {"cref.noexpire", cref_noexpire},
                {"cref.norepl", cref_norepl},
                {"cref.bare", cref_bare}};
    for (size_t i = 0; i < sizeof cmds / sizeof cmds[0]; i++)
        if (RM_CreateCommand(ctx, cmds[i].name, cmds[i].fn, "write deny-oom fast", 1, 1, 1) != REDISMODULE_OK)
            return REDISMODULE_ERR;
    /* Its keys follow numkeys; a benchmark on one server needs no key spec. */
    if (RM_CreateCommand(ctx, "cref.keys", cref_keys, "write deny-oom fast", 0, 0, 0) != REDISMODULE_OK)
        return REDISMODULE_ERR;
    return REDISMODULE_OK;
}
