/*
 * call.c: running one command, the same way for every command:
 *
 *   collect the arguments, open every key the command names, read each
 *   one's state and the clock -> Go parses, computes and decides -> C writes
 *   each key with an absolute expiry, replicates the effects, replies, counts.
 *
 * Go never calls the server and C never decides anything.
 */
#include <limits.h>
#include <math.h>
#include <string.h>
#include <strings.h>

#include "module.h"
#include "_cgo_export.h"

rl_counters rl_stats[RL_NCOMMANDS];
RedisModuleString *rl_pxat;

/* Copies a sorted-set entry's member into buf (RL_MEMBER_MAX bytes, cut
 * and NUL-terminated) and returns its whole length; frees the member. */
static size_t rl_copy_member(RedisModuleCtx *ctx, RedisModuleString *m, char *buf) {
    size_t len = 0;
    buf[0] = '\0';
    if (m == NULL) return 0;
    const char *p = RM_StringPtrLen(m, &len);
    size_t n = len < RL_MEMBER_MAX - 1 ? len : RL_MEMBER_MAX - 1;
    memcpy(buf, p, n);
    buf[n] = '\0';
    RM_FreeString(ctx, m);
    return len;
}

/* Reads the oldest (last = 0) or newest (last = 1) entry of a sorted set. */
static void rl_zset_end(rl_key *k, int last, double *score, char *member, size_t *len) {
    RedisModuleKey *key = (RedisModuleKey *)k->key;
    *score = -INFINITY;
    *len = 0;
    member[0] = '\0';
    int ok = last ? RM_ZsetLastInScoreRange(key, -INFINITY, INFINITY, 0, 0)
                  : RM_ZsetFirstInScoreRange(key, -INFINITY, INFINITY, 0, 0);
    if (ok != REDISMODULE_OK) return;
    if (!RM_ZsetRangeEndReached(key))
        *len = rl_copy_member((RedisModuleCtx *)k->ctx, RM_ZsetRangeCurrentElement(key, score), member);
    RM_ZsetRangeStop(key);
}

/* Opens a key (for writing too unless the command is read-only) and reads
 * what it holds: its kind, a string's value, its expiry, and a sorted set's
 * size and end entries. Opening is not a side effect bad input must avoid
 * (only writes are), so keys are read before Go parses the arguments. */
static void rl_read_key(RedisModuleCtx *ctx, rl_key *k, RedisModuleString *name, int readonly) {
    int mode = readonly ? REDISMODULE_READ : (REDISMODULE_READ | REDISMODULE_WRITE);
    RedisModuleKey *key = RM_OpenKey(ctx, name, mode);
    k->ctx = ctx;
    k->name = name;
    k->key = key;
    k->id = NULL;
    k->conc_swept = -1;
    k->val = NULL;
    k->val_len = 0;
    k->z_len = 0;
    k->write = RL_WRITE_NONE;
    switch (RM_KeyType(key)) {
    case REDISMODULE_KEYTYPE_EMPTY:
        k->kind = RL_KEY_EMPTY;
        break;
    case REDISMODULE_KEYTYPE_STRING:
        k->kind = RL_KEY_STRING;
        k->val = RM_StringDMA(key, &k->val_len, REDISMODULE_READ);
        break;
    case REDISMODULE_KEYTYPE_ZSET:
        k->kind = RL_KEY_ZSET;
        k->z_len = (long long)RM_ValueLength(key);
        rl_zset_end(k, 0, &k->z_oldest, k->z_oldest_member, &k->z_oldest_len);
        rl_zset_end(k, 1, &k->z_newest, k->z_newest_member, &k->z_newest_len);
        break;
    default:
        k->kind = RL_KEY_OTHER;
    }
    /* A key opened only for reading is NULL when it does not exist. */
    k->expire_at_ms = key != NULL && k->kind != RL_KEY_EMPTY ? RM_GetAbsExpire(key) : REDISMODULE_NO_EXPIRE;
}

/* Reads LIMITS's field when Go's parser meets the word (shim.h): the hash
 * opened read only and closed at once (it may even be one of the
 * command's own keys), its field's value kept until the call ends. */
const rl_limits *rl_limits_field(rl_call *c, int arg) {
    if (c->nlimits >= RL_MAX_KEYS || arg < 1 || arg + 1 >= c->argc) return NULL;
    rl_limits *l = &c->limits[c->nlimits++];
    RedisModuleCtx *ctx = (RedisModuleCtx *)c->ctx;
    RedisModuleString **argv = (RedisModuleString **)c->rargv;
    l->kind = RL_LIMITS_ABSENT;
    l->val = NULL;
    l->len = 0;
    l->str = NULL;
    RedisModuleKey *key = RM_OpenKey(ctx, argv[arg], REDISMODULE_READ);
    int type = RM_KeyType(key);
    if (type == REDISMODULE_KEYTYPE_HASH) {
        RedisModuleString *v = NULL;
        RM_HashGet(key, REDISMODULE_HASH_NONE, argv[arg + 1], &v, NULL);
        if (v != NULL) {
            l->kind = RL_LIMITS_FOUND;
            l->str = v;
            l->val = RM_StringPtrLen(v, &l->len);
        }
    } else if (type != REDISMODULE_KEYTYPE_EMPTY) {
        l->kind = RL_LIMITS_WRONGTYPE;
    }
    if (key) RM_CloseKey(key);
    return l;
}

/* The number of keys RL.ALL names at argument 1 (p, len) of argc, read as
 * Go reads integers (an optional '+', leading zeros), or 0 when it is not
 * from 1 to RL_MAX_KEYS with that many arguments after it (Go then replies
 * the error). */
static int rl_numkeys(const char *p, size_t len, int argc) {
    size_t i = len > 0 && p[0] == '+' ? 1 : 0;
    if (argc < 3 || i == len) return 0;
    int n = 0;
    for (; i < len; i++) {
        if (p[i] < '0' || p[i] > '9') return 0;
        n = n * 10 + (p[i] - '0');
        if (n > RL_MAX_KEYS) return 0;
    }
    return n >= 1 && 2 + n <= argc ? n : 0;
}

/* maxmemory, read from INFO memory at most once a second: a config change
 * reaches the check within a second. */
static unsigned long long rl_maxmemory(RedisModuleCtx *ctx) {
    static unsigned long long cached;
    static long long read_at = LLONG_MIN;
    long long now = RM_Milliseconds();
    if (cached != 0 && now >= read_at && now - read_at < 1000) return cached;
    if (!RM_GetServerInfo || !RM_ServerInfoGetFieldUnsigned || !RM_FreeServerInfo) return 0;
    RedisModuleServerInfoData *info = RM_GetServerInfo(ctx, "memory");
    if (info == NULL) return 0;
    int err = 0;
    unsigned long long v = RM_ServerInfoGetFieldUnsigned(info, "maxmemory", &err);
    RM_FreeServerInfo(ctx, info);
    cached = err ? 0 : v;
    read_at = now;
    return cached;
}

long long rl_memory_room(rl_call *c) {
    float ratio = RM_GetUsedMemoryRatio ? RM_GetUsedMemoryRatio() : 0;
    if (!(ratio > 0)) return -1; /* no maxmemory */
    unsigned long long max = rl_maxmemory((RedisModuleCtx *)c->ctx);
    if (max == 0) return -1;
    double room = (1.0 - (double)ratio) * (double)max;
    return room <= 0 ? 0 : room >= (double)LLONG_MAX ? LLONG_MAX : (long long)room;
}

/* Writes one key as Go decided, with an absolute expiry, and replicates the
 * effect, never the command, so replicas never read a clock and need not
 * load the module. Returns 0 when the write could not be made. */
static int rl_write_key(RedisModuleCtx *ctx, rl_call *c, rl_key *k) {
    RedisModuleKey *key = (RedisModuleKey *)k->key;
    RedisModuleString *name = (RedisModuleString *)k->name;
    switch (k->write) {
    case RL_WRITE_SET: {
        /* Write in place: sized with StringTruncate (which creates a missing
         * key), filled through DMA. Unlike StringSet, which deletes the key
         * and adds it again, this allocates nothing once the key exists. */
        size_t len = 0;
        char *p = RM_StringTruncate(key, k->set_len) == REDISMODULE_OK ? RM_StringDMA(key, &len, REDISMODULE_WRITE)
                                                                        : NULL;
        if (p == NULL || len != k->set_len) return 0;
        memcpy(p, k->set_val, len);
        /* A fixed window's count keeps the expiry it had (the window's
         * end): setting it again would cost two more lookups. expire_ms
         * is never -1. */
        if (k->expire_at_ms != k->expire_ms) RM_SetAbsExpire(key, k->expire_ms);
        RM_SignalModifiedKey(ctx, name);
        RM_Replicate(ctx, "SET", "sbsl", name, k->set_val, k->set_len, rl_pxat, k->expire_ms);
        /* What SET key value PXAT t emits, on a replica too. */
        RM_NotifyKeyspaceEvent(ctx, REDISMODULE_NOTIFY_STRING, "set", name);
        RM_NotifyKeyspaceEvent(ctx, REDISMODULE_NOTIFY_GENERIC, "expire", name);
        return 1;
    }
    case RL_WRITE_DEL:
        RM_DeleteKey(key);
        RM_SignalModifiedKey(ctx, name);
        RM_Replicate(ctx, "DEL", "s", name);
        RM_NotifyKeyspaceEvent(ctx, REDISMODULE_NOTIFY_GENERIC, "del", name);
        return 1;
    case RL_WRITE_ZLOG:
        rl_zlog_write(ctx, k);
        return 1;
    case RL_WRITE_CONC:
        if (k->conc_id_arg < 2 || k->conc_id_arg >= c->argc) return 0;
        rl_conc_write(ctx, c, k);
        return 1;
    default:
        return 1;
    }
}

/* Carries out what Go decided: each key's write, then the reply. Writes
 * happen only for consuming commands; several keys' effects reach replicas
 * and the AOF wrapped in one MULTI/EXEC by the server. */
static void rl_finish(RedisModuleCtx *ctx, rl_call *c, const rl_command_def *def, rl_counters *n) {
    if (c->action == RL_ACT_REPLY) {
        for (int i = 0; i < c->nkeys; i++) {
            rl_key *k = &c->keys[i];
            if (k->write != RL_WRITE_NONE && (def->readonly || k->key == NULL)) { /* never: Go writes only for consuming commands */
                c->action = RL_ACT_ERROR;
                strcpy(c->err, "ERR internal error: a write without a key open for writing");
                break;
            }
        }
    }
    switch (c->action) {
    case RL_ACT_REPLY:
        break;
    case RL_ACT_WRONGTYPE:
        n->errors++;
        RM_ReplyWithError(ctx, c->err[0] ? c->err : REDISMODULE_ERRORMSG_WRONGTYPE);
        return;
    case RL_ACT_ARITY:
        n->errors++;
        RM_WrongArity(ctx);
        return;
    default:
        n->errors++;
        c->err[sizeof(c->err) - 1] = '\0';
        RM_ReplyWithError(ctx, c->err[0] ? c->err : "ERR internal error");
        return;
    }
    for (int i = 0; i < c->nkeys; i++) {
        if (!rl_write_key(ctx, c, &c->keys[i])) {
            n->errors++;
            RM_ReplyWithError(ctx, "ERR internal error: cannot write the limiter's state");
            return;
        }
    }
    if (c->reply_len == 1) { /* CONC.RELEASE: admitted counts slots freed, refused calls that found none */
        if (c->reply[0]) n->admitted++;
        else n->refused++;
        RM_ReplyWithLongLong(ctx, c->reply[0]);
        return;
    }
    if (c->reply[0]) n->refused++;
    else n->admitted++;
    int len = c->reply_len >= 5 && c->reply_len <= RL_MAX_REPLY ? c->reply_len : 5;
    RM_ReplyWithArray(ctx, len);
    for (int i = 0; i < len; i++) RM_ReplyWithLongLong(ctx, c->reply[i]);
}

/* The keys of a command with LIMITS (every command of a limiter) for the
 * server, which asks the command itself (the getkeys-api flag): Redis
 * Cluster finds a command's keys through this callback or the legacy
 * first/last/step, never through its key specs, so without it the cluster
 * would neither redirect RL.ALL nor refuse a LIMITS hash of another slot.
 * The limiter's keys (RL.ALL's numkeys of them; the key and the hold's),
 * then each LIMITS hash, read only: each word LIMITS with two arguments
 * after it, in order (as Go's parser meets them in a call it accepts). */
static int rl_report_keys(RedisModuleCtx *ctx, const rl_command_def *def, RedisModuleString **argv, int argc) {
    size_t len = 0;
    int nkeys = 0, first = 1;
    if (def->numkeys) {
        const char *p = argc >= 2 ? RM_StringPtrLen(argv[1], &len) : NULL;
        nkeys = p ? rl_numkeys(p, len, argc) : 0;
        first = 2;
    } else {
        nkeys = def->hold && argc >= 3 ? 2 : argc >= 2 ? 1 : 0;
    }
    int flags = (int)(def->readonly ? RL_KEYS_RO : RL_KEYS_RW);
    for (int i = 0; i < nkeys; i++) {
        if (RM_KeyAtPosWithFlags) RM_KeyAtPosWithFlags(ctx, first + i, flags);
        else RM_KeyAtPos(ctx, first + i);
    }
    for (int i = first + nkeys, found = 0; nkeys > 0 && i + 2 < argc && found < RL_MAX_KEYS; i++) {
        size_t n = 0;
        const char *w = RM_StringPtrLen(argv[i], &n);
        if (n != 6 || strncasecmp(w, "LIMITS", 6) != 0) continue;
        if (RM_KeyAtPosWithFlags) RM_KeyAtPosWithFlags(ctx, i + 1, (int)RL_KEYS_RO);
        else RM_KeyAtPos(ctx, i + 1);
        found++;
        i += 2;
    }
    return REDISMODULE_OK;
}

int rl_command(RedisModuleCtx *ctx, RedisModuleString **argv, int argc, int idx) {
    const rl_command_def *def = &rl_commands[idx];
    if ((def->numkeys || def->limits) && RM_IsKeysPositionRequest && RM_IsKeysPositionRequest(ctx))
        return rl_report_keys(ctx, def, argv, argc);
    rl_counters *n = &rl_stats[idx];
    n->calls++;
    if (argc > RL_MAX_ARGS || argc < 2) {
        n->errors++;
        return RM_WrongArity(ctx);
    }
    rl_call c;
    c.cmd = idx;
    c.argc = argc;
    for (int i = 0; i < argc; i++) c.argv[i].ptr = RM_StringPtrLen(argv[i], &c.argv[i].len);
    c.action = RL_ACT_ERROR;
    c.reply_len = 5;
    c.err[0] = '\0';
    c.ctx = ctx;

    /* Every key, then the clock: one read each, before the one crossing. */
    c.nkeys = def->numkeys ? rl_numkeys(c.argv[1].ptr, c.argv[1].len, argc) : def->hold && argc >= 3 ? 2 : 1;
    int first = def->numkeys ? 2 : 1;
    for (int i = 0; i < c.nkeys; i++) rl_read_key(ctx, &c.keys[i], argv[first + i], def->readonly);
    c.now_ns = rl_now_ns();
    c.nlimits = 0;
    c.rargv = argv;

    rlExecute(&c);

    rl_finish(ctx, &c, def, n);
    for (int i = 0; i < c.nkeys; i++) {
        if (c.keys[i].id) RM_FreeString(ctx, (RedisModuleString *)c.keys[i].id);
        if (c.keys[i].key) RM_CloseKey((RedisModuleKey *)c.keys[i].key);
    }
    for (int i = 0; i < c.nlimits; i++)
        if (c.limits[i].str) RM_FreeString(ctx, (RedisModuleString *)c.limits[i].str);
    return REDISMODULE_OK;
}
