/*
 * shim.c: everything that talks to the server. It loads the API, registers
 * the commands from one table, and runs each command the same way:
 *
 *   collect the arguments -> Go parses them, calls rl_read (open the key,
 *   read the clock), computes -> C writes with an absolute expiry, replicates
 *   the effect, replies, counts.
 *
 * Go never calls the server and C never decides anything.
 */
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "rmapi.h" /* the API: one RM_* pointer per function, rl_load_api, rl_now_ns */
#include "shim.h"
#include "_cgo_export.h"

#define RL_MODULE_NAME "ratelimit"
#define RL_MODULE_VERSION 1 /* MODULE LIST "ver" */
#define RL_ACL_CATEGORY "ratelimit"

/* ---- The command table ---- */

static RedisModuleCommandInfoVersion rl_info_version = {
    1, sizeof(RedisModuleCommandHistoryEntry), sizeof(RedisModuleCommandKeySpec),
    sizeof(RedisModuleCommandArg)};

/* The key is argument 1 and the only key. */
static RedisModuleCommandKeySpec rl_keys_write[] = {
    {.notes = "the limiter's state",
     .flags = REDISMODULE_CMD_KEY_RW | REDISMODULE_CMD_KEY_ACCESS | REDISMODULE_CMD_KEY_UPDATE,
     .begin_search_type = REDISMODULE_KSPEC_BS_INDEX,
     .bs.index.pos = 1,
     .find_keys_type = REDISMODULE_KSPEC_FK_RANGE,
     .fk.range = {0, 1, 0}},
    {0}};

static RedisModuleCommandKeySpec rl_keys_read[] = {
    {.notes = "the limiter's state",
     .flags = REDISMODULE_CMD_KEY_RO | REDISMODULE_CMD_KEY_ACCESS,
     .begin_search_type = REDISMODULE_KSPEC_BS_INDEX,
     .bs.index.pos = 1,
     .find_keys_type = REDISMODULE_KSPEC_FK_RANGE,
     .fk.range = {0, 1, 0}},
    {0}};

#define RL_KEY_ARG {.name = "key", .type = REDISMODULE_ARG_TYPE_KEY, .key_spec_index = 0}
#define RL_INT_ARG(n, s) {.name = n, .type = REDISMODULE_ARG_TYPE_INTEGER, .key_spec_index = -1, .summary = s}
#define RL_OPT_INT_ARG(n, s)                                                               \
    {.name = n, .type = REDISMODULE_ARG_TYPE_INTEGER, .key_spec_index = -1, .summary = s, \
     .flags = REDISMODULE_CMD_ARG_OPTIONAL}
#define RL_MS_ARG                                                                                   \
    {.name = "ms", .type = REDISMODULE_ARG_TYPE_PURE_TOKEN, .key_spec_index = -1, .token = "MS",  \
     .summary = "reply times in milliseconds, rounded up", .flags = REDISMODULE_CMD_ARG_OPTIONAL}

static RedisModuleCommandArg rl_gcra_args[] = {
    RL_KEY_ARG,
    RL_INT_ARG("max_burst", "extra requests allowed at once: the limit is max_burst + 1 (0 or more)"),
    RL_INT_ARG("count", "requests admitted per period (1 or more)"),
    RL_INT_ARG("period", "the period in whole seconds (1 to 9223372036)"),
    RL_OPT_INT_ARG("quantity", "the cost of this call, default 1; 0 reports, negative gives back"),
    RL_MS_ARG,
    {0}};

static RedisModuleCommandArg rl_tb_args[] = {
    RL_KEY_ARG,
    RL_INT_ARG("capacity", "the most tokens the bucket holds; it starts full (1 or more)"),
    RL_INT_ARG("refill_tokens", "tokens added per refill_period, continuously (1 or more)"),
    RL_INT_ARG("refill_period", "the refill period in whole seconds (1 to 9223372036)"),
    RL_OPT_INT_ARG("tokens", "tokens to take, default 1; 0 reports, negative puts back"),
    RL_MS_ARG,
    {0}};

static RedisModuleCommandArg rl_lb_args[] = {
    RL_KEY_ARG,
    RL_INT_ARG("capacity", "the most requests that may wait (0 or more)"),
    RL_INT_ARG("leak_count", "requests that leave per leak_period (1 or more)"),
    RL_INT_ARG("leak_period", "the leak period in whole seconds (1 to 9223372036)"),
    RL_OPT_INT_ARG("quantity", "the cost of this request, default 1; 0 reports"),
    RL_MS_ARG,
    {0}};

#define RL_WINDOW_ARGS(limit_summary)                                                               \
    {RL_KEY_ARG,                                                                                    \
     RL_INT_ARG("limit", limit_summary),                                                            \
     RL_INT_ARG("window", "the window in whole seconds, aligned to the Unix epoch (1 to 9223372036)"), \
     RL_OPT_INT_ARG("cost", "the cost of this hit, default 1; 0 reports"),                          \
     RL_MS_ARG,                                                                                     \
     {0}}

static RedisModuleCommandArg rl_window_args[] = RL_WINDOW_ARGS("hits admitted per window (1 or more)");
static RedisModuleCommandArg rl_log_args[] = RL_WINDOW_ARGS("hits admitted per window (1 to 100000)");

typedef struct {
    const char *name;      /* as registered */
    const char *info_name; /* its INFO field */
    int op;                /* enum rl_op */
    int readonly;          /* a peek: readonly, opens the key for reading only */
    int alias;             /* registered only while the CL.THROTTLE alias is on */
    int arity;
    const char *summary;
    const char *complexity;
    RedisModuleCommandArg *args;
} rl_command_def;

static const rl_command_def rl_commands[] = {
    {"gcra.throttle", "gcra_throttle", RL_OP_GCRA_THROTTLE, 0, 0, -5,
     "GCRA rate limit: admit or refuse a request of the given cost, redis-cell's CL.THROTTLE reply", "O(1)",
     rl_gcra_args},
    {"cl.throttle", "cl_throttle", RL_OP_GCRA_THROTTLE, 0, 1, -5,
     "redis-cell compatible alias of GCRA.THROTTLE", "O(1)", rl_gcra_args},
    {"gcra.peek", "gcra_peek", RL_OP_GCRA_PEEK, 1, 0, -5,
     "What GCRA.THROTTLE would reply now, changing nothing", "O(1)", rl_gcra_args},
    {"tb.take", "tb_take", RL_OP_TB_TAKE, 0, 0, -5,
     "Token bucket: take tokens when all are available; reply limited, capacity, tokens left, retry, full in",
     "O(1)", rl_tb_args},
    {"tb.peek", "tb_peek", RL_OP_TB_PEEK, 1, 0, -5, "What TB.TAKE would reply now, changing nothing", "O(1)",
     rl_tb_args},
    {"lb.enqueue", "lb_enqueue", RL_OP_LB_ENQUEUE, 0, 0, -5,
     "Leaky-bucket shaper: queue a request; reply limited, capacity, free places, retry, delay before it goes",
     "O(1)", rl_lb_args},
    {"lb.peek", "lb_peek", RL_OP_LB_PEEK, 1, 0, -5, "What LB.ENQUEUE would reply now, changing nothing", "O(1)",
     rl_lb_args},
    {"sw.hit", "sw_hit", RL_OP_SW_HIT, 0, 0, -4,
     "Sliding window counter: the previous window weighted by its overlap plus the current one", "O(1)",
     rl_window_args},
    {"sw.peek", "sw_peek", RL_OP_SW_PEEK, 1, 0, -4, "What SW.HIT would reply now, changing nothing", "O(1)",
     rl_window_args},
    {"fw.hit", "fw_hit", RL_OP_FW_HIT, 0, 0, -4,
     "Fixed window aligned to the epoch: the cheapest, admits up to twice the limit across a boundary", "O(1)",
     rl_window_args},
    {"fw.peek", "fw_peek", RL_OP_FW_PEEK, 1, 0, -4, "What FW.HIT would reply now, changing nothing", "O(1)",
     rl_window_args},
    {"sl.hit", "sl_hit", RL_OP_SL_HIT, 0, 0, -4,
     "Sliding log: the exact count of hits in the trailing window, in a sorted set", "O(log N + M)",
     rl_log_args},
    {"sl.peek", "sl_peek", RL_OP_SL_PEEK, 1, 0, -4, "What SL.HIT would reply now, changing nothing", "O(log N + M)",
     rl_log_args},
};
#define RL_NCOMMANDS ((int)(sizeof(rl_commands) / sizeof(rl_commands[0])))

typedef struct {
    unsigned long long calls, admitted, refused, errors;
} rl_counters;

static rl_counters rl_stats[RL_NCOMMANDS];
static int rl_registered[RL_NCOMMANDS];
static int rl_alias_on = 1;
static int rl_category_on = 0;
static RedisModuleString *rl_pxat; /* "PXAT", made once: replicating it then allocates nothing */

/* ---- Running a command ---- */

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
static void rl_zset_end(rl_call *c, int last, double *score, char *member, size_t *len) {
    RedisModuleKey *key = (RedisModuleKey *)c->key;
    *score = -INFINITY;
    *len = 0;
    member[0] = '\0';
    int ok = last ? RM_ZsetLastInScoreRange(key, -INFINITY, INFINITY, 0, 0)
                  : RM_ZsetFirstInScoreRange(key, -INFINITY, INFINITY, 0, 0);
    if (ok != REDISMODULE_OK) return;
    if (!RM_ZsetRangeEndReached(key))
        *len = rl_copy_member((RedisModuleCtx *)c->ctx, RM_ZsetRangeCurrentElement(key, score), member);
    RM_ZsetRangeStop(key);
}

void rl_read(rl_call *c) {
    int mode = c->readonly ? REDISMODULE_READ : (REDISMODULE_READ | REDISMODULE_WRITE);
    RedisModuleKey *key = RM_OpenKey((RedisModuleCtx *)c->ctx, (RedisModuleString *)c->key_name, mode);
    c->key = key;
    c->now_ns = rl_now_ns();
    c->val = NULL;
    c->val_len = 0;
    c->z_len = 0;
    switch (RM_KeyType(key)) {
    case REDISMODULE_KEYTYPE_EMPTY:
        c->kind = RL_KEY_EMPTY;
        break;
    case REDISMODULE_KEYTYPE_STRING:
        c->kind = RL_KEY_STRING;
        c->val = RM_StringDMA(key, &c->val_len, REDISMODULE_READ);
        break;
    case REDISMODULE_KEYTYPE_ZSET:
        c->kind = RL_KEY_ZSET;
        c->z_len = (long long)RM_ValueLength(key);
        rl_zset_end(c, 0, &c->z_oldest, c->z_oldest_member, &c->z_oldest_len);
        rl_zset_end(c, 1, &c->z_newest, c->z_newest_member, &c->z_newest_len);
        break;
    default:
        c->kind = RL_KEY_OTHER;
    }
    /* A key opened only for reading is NULL when it does not exist. */
    c->expire_at_ms = key != NULL && c->kind != RL_KEY_EMPTY ? RM_GetAbsExpire(key) : REDISMODULE_NO_EXPIRE;
}

/* ---- Sliding log: a sorted set of entries scored in Unix microseconds ---- */

void rl_zlog_scan(rl_call *c, long long after_us) {
    RedisModuleKey *key = (RedisModuleKey *)c->key;
    c->z_live = 0;
    if (c->kind != RL_KEY_ZSET) return;
    long long gone = 0;
    if (RM_ZsetFirstInScoreRange(key, -INFINITY, (double)after_us, 0, 0) == REDISMODULE_OK) {
        if (!RM_ZsetRangeEndReached(key)) {
            do gone++;
            while (RM_ZsetRangeNext(key));
        }
        RM_ZsetRangeStop(key);
    }
    c->z_live = c->z_len - gone;
}

double rl_zlog_nth(rl_call *c, long long after_us, long long k) {
    RedisModuleKey *key = (RedisModuleKey *)c->key;
    double score = -INFINITY;
    if (c->kind != RL_KEY_ZSET || k < 1) return -INFINITY;
    if (RM_ZsetFirstInScoreRange(key, (double)after_us, INFINITY, 1, 0) != REDISMODULE_OK) return -INFINITY;
    int there = !RM_ZsetRangeEndReached(key);
    for (long long i = 1; there && i < k; i++) there = RM_ZsetRangeNext(key);
    RedisModuleString *e = there ? RM_ZsetRangeCurrentElement(key, &score) : NULL;
    RM_ZsetRangeStop(key);
    if (e == NULL) return -INFINITY;
    RM_FreeString((RedisModuleCtx *)c->ctx, e);
    return score;
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

#define RL_ZBATCH 64 /* members per replicated ZADD / ZREM */

/* Removes the entries scored within [min, max] (the bounds as
 * ZREMRANGEBYSCORE takes them, exclusive when minex), replicates that, and
 * emits the events ZREMRANGEBYSCORE emits: zremrangebyscore, then del if
 * the set is gone. Returns how many it removed. */
static long long rl_zlog_remove(RedisModuleCtx *ctx, rl_call *c, double min, int minex, double max,
                                const char *rmin, const char *rmax) {
    RedisModuleKey *key = (RedisModuleKey *)c->key;
    RedisModuleString *name = (RedisModuleString *)c->key_name;
    RedisModuleString *batch[RL_ZBATCH];
    long long removed = 0;
    /* The module API cannot remove while it iterates: collect a batch,
     * stop, remove it, and go again. */
    for (;;) {
        int n = 0;
        if (RM_KeyType(key) == REDISMODULE_KEYTYPE_ZSET &&
            RM_ZsetFirstInScoreRange(key, min, max, minex, 0) == REDISMODULE_OK) {
            while (!RM_ZsetRangeEndReached(key) && n < RL_ZBATCH) {
                batch[n++] = RM_ZsetRangeCurrentElement(key, NULL);
                if (!RM_ZsetRangeNext(key)) break;
            }
            RM_ZsetRangeStop(key);
        }
        for (int i = 0; i < n; i++) {
            RM_ZsetRem(key, batch[i], NULL);
            RM_FreeString(ctx, batch[i]);
        }
        removed += n;
        if (n < RL_ZBATCH) break;
    }
    if (removed > 0) {
        RM_Replicate(ctx, "ZREMRANGEBYSCORE", "scc", name, rmin, rmax);
        RM_NotifyKeyspaceEvent(ctx, REDISMODULE_NOTIFY_ZSET, "zremrangebyscore", name);
        if (RM_KeyType(key) == REDISMODULE_KEYTYPE_EMPTY) /* the API deletes an emptied set */
            RM_NotifyKeyspaceEvent(ctx, REDISMODULE_NOTIFY_GENERIC, "del", name);
    }
    return removed;
}

/* A sliding-log write: remove the entries that left the window, move the
 * ones dated after now to now (z_redate: a clock stepped back), add z_add
 * entries scored z_score_us (members "<score>-<n>", unique), expire the key
 * when its newest entry leaves, and replicate exactly that, with the events
 * the replicated commands emit on a replica. */
static void rl_zlog_write(RedisModuleCtx *ctx, rl_call *c) {
    RedisModuleKey *key = (RedisModuleKey *)c->key;
    RedisModuleString *name = (RedisModuleString *)c->key_name;
    RedisModuleString *batch[2 * RL_ZBATCH];
    char score[24], member[48];
    int slen = snprintf(score, sizeof score, "%lld", c->z_score_us);

    char cutoff[24];
    snprintf(cutoff, sizeof cutoff, "%lld", c->z_cutoff_us);
    rl_zlog_remove(ctx, c, -INFINITY, 0, (double)c->z_cutoff_us, "-inf", cutoff);
    long long moved = 0;
    if (c->z_redate) {
        char after[26];
        snprintf(after, sizeof after, "(%lld", c->z_score_us);
        moved = rl_zlog_remove(ctx, c, (double)c->z_score_us, 1, INFINITY, after, "+inf");
    }

    long long seq = (long long)RM_ValueLength(key), total = c->z_add + moved;
    int n = 0;
    for (long long added = 0; added < total;) {
        int mlen = snprintf(member, sizeof member, "%s-%lld", score, seq++);
        RedisModuleString *m = RM_CreateString(ctx, member, (size_t)mlen);
        int flags = REDISMODULE_ZADD_NX;
        RM_ZsetAdd(key, (double)c->z_score_us, m, &flags);
        if (!(flags & REDISMODULE_ZADD_ADDED)) { /* the member exists: next number */
            RM_FreeString(ctx, m);
            continue;
        }
        added++;
        batch[n++] = RM_CreateString(ctx, score, (size_t)slen);
        batch[n++] = m;
        if (n == 2 * RL_ZBATCH || added == total) {
            RM_Replicate(ctx, "ZADD", "sv", name, batch, (size_t)n);
            RM_NotifyKeyspaceEvent(ctx, REDISMODULE_NOTIFY_ZSET, "zadd", name);
            for (int i = 0; i < n; i++) RM_FreeString(ctx, batch[i]);
            n = 0;
        }
    }
    RM_SetAbsExpire(key, c->expire_ms);
    RM_Replicate(ctx, "PEXPIREAT", "sl", name, c->expire_ms);
    RM_NotifyKeyspaceEvent(ctx, REDISMODULE_NOTIFY_GENERIC, "expire", name);
    RM_SignalModifiedKey(ctx, name);
}

static void rl_reply(RedisModuleCtx *ctx, const rl_call *c) {
    RM_ReplyWithArray(ctx, 5);
    for (int i = 0; i < 5; i++) RM_ReplyWithLongLong(ctx, c->reply[i]);
}

/* Carries out what Go decided. Writes happen only for admitted calls; the
 * key's expiry is absolute and the replicas get the effect, never the
 * command, so they never read a clock and need not load the module. */
static void rl_finish(RedisModuleCtx *ctx, rl_call *c, rl_counters *n) {
    RedisModuleKey *key = (RedisModuleKey *)c->key;
    RedisModuleString *name = (RedisModuleString *)c->key_name;
    int writes = c->action == RL_ACT_SET || c->action == RL_ACT_DEL || c->action == RL_ACT_ZLOG;
    if (writes && (c->readonly || key == NULL)) { /* never: Go writes only for consuming commands */
        c->action = RL_ACT_ERROR;
        strcpy(c->err, "ERR internal error: a write without a key open for writing");
    }
    switch (c->action) {
    case RL_ACT_SET: {
        /* Write in place: sized with StringTruncate (which creates a missing
         * key), filled through DMA. Unlike StringSet, which deletes the key
         * and adds it again, this allocates nothing once the key exists. */
        size_t len = 0;
        char *p = RM_StringTruncate(key, c->set_len) == REDISMODULE_OK
                      ? RM_StringDMA(key, &len, REDISMODULE_WRITE)
                      : NULL;
        if (p == NULL || len != c->set_len) {
            n->errors++;
            RM_ReplyWithError(ctx, "ERR internal error: cannot write the limiter's state");
            return;
        }
        memcpy(p, c->set_val, len);
        /* A fixed window's count keeps the expiry it had (the window's
         * end): setting it again would cost two more lookups. expire_ms
         * is never -1. */
        if (c->expire_at_ms != c->expire_ms) RM_SetAbsExpire(key, c->expire_ms);
        RM_SignalModifiedKey(ctx, name);
        RM_Replicate(ctx, "SET", "sbsl", name, c->set_val, c->set_len, rl_pxat, c->expire_ms);
        /* What SET key value PXAT t emits, on a replica too. */
        RM_NotifyKeyspaceEvent(ctx, REDISMODULE_NOTIFY_STRING, "set", name);
        RM_NotifyKeyspaceEvent(ctx, REDISMODULE_NOTIFY_GENERIC, "expire", name);
        break;
    }
    case RL_ACT_DEL:
        RM_DeleteKey(key);
        RM_SignalModifiedKey(ctx, name);
        RM_Replicate(ctx, "DEL", "s", name);
        RM_NotifyKeyspaceEvent(ctx, REDISMODULE_NOTIFY_GENERIC, "del", name);
        break;
    case RL_ACT_ZLOG:
        rl_zlog_write(ctx, c);
        break;
    case RL_ACT_REPLY:
        break;
    case RL_ACT_WRONGTYPE:
        n->errors++;
        RM_ReplyWithError(ctx, REDISMODULE_ERRORMSG_WRONGTYPE);
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
    if (c->reply[0]) n->refused++;
    else n->admitted++;
    rl_reply(ctx, c);
}

static int rl_command(RedisModuleCtx *ctx, RedisModuleString **argv, int argc, int idx) {
    const rl_command_def *def = &rl_commands[idx];
    rl_counters *n = &rl_stats[idx];
    n->calls++;
    if (argc > RL_MAX_ARGS || argc < 2) {
        n->errors++;
        return RM_WrongArity(ctx);
    }
    rl_call c;
    c.op = def->op;
    c.readonly = def->readonly;
    c.argc = argc;
    for (int i = 0; i < argc; i++) c.argv[i].ptr = RM_StringPtrLen(argv[i], &c.argv[i].len);
    c.action = RL_ACT_ERROR;
    c.z_redate = 0;
    c.err[0] = '\0';
    c.ctx = ctx;
    c.key_name = argv[1];
    c.key = NULL;

    rlExecute(&c);

    rl_finish(ctx, &c, n);
    if (c.key) RM_CloseKey((RedisModuleKey *)c.key);
    return REDISMODULE_OK;
}

/* The server passes no user data to a command, so each table row gets its
 * own entry point. */
#define RL_HANDLER(i)                                                                  \
    static int rl_handler_##i(RedisModuleCtx *ctx, RedisModuleString **argv, int argc) { \
        return rl_command(ctx, argv, argc, i);                                         \
    }
RL_HANDLER(0)
RL_HANDLER(1)
RL_HANDLER(2)
RL_HANDLER(3)
RL_HANDLER(4)
RL_HANDLER(5)
RL_HANDLER(6)
RL_HANDLER(7)
RL_HANDLER(8)
RL_HANDLER(9)
RL_HANDLER(10)
RL_HANDLER(11)
RL_HANDLER(12)
RL_HANDLER(13)
RL_HANDLER(14)
RL_HANDLER(15)
static const RedisModuleCmdFunc rl_handlers[] = {
    rl_handler_0,  rl_handler_1,  rl_handler_2,  rl_handler_3,  rl_handler_4,  rl_handler_5,
    rl_handler_6,  rl_handler_7,  rl_handler_8,  rl_handler_9,  rl_handler_10, rl_handler_11,
    rl_handler_12, rl_handler_13, rl_handler_14, rl_handler_15};
_Static_assert(sizeof(rl_handlers) / sizeof(rl_handlers[0]) >= sizeof(rl_commands) / sizeof(rl_commands[0]),
               "one handler per command");

/* ---- INFO ratelimit ---- */

static const char *rl_clock_name(void) {
    return RM_CachedMicroseconds ? "cached-command-time" : "wall-clock-ms";
}

static void rl_info(RedisModuleInfoCtx *ictx, int for_crash_report) {
    if (RM_InfoAddSection(ictx, "") != REDISMODULE_OK) return;
    RM_InfoAddFieldCString(ictx, "clock", rl_clock_name());
    RM_InfoAddFieldCString(ictx, "cl_throttle_alias", rl_alias_on ? "on" : "off");
    RM_InfoAddFieldCString(ictx, "acl_category", rl_category_on ? RL_ACL_CATEGORY : "none");
    if (!for_crash_report) RM_InfoAddFieldLongLong(ictx, "go_runtime_bytes", rlGoMemory());
    for (int i = 0; i < RL_NCOMMANDS; i++) {
        if (!rl_registered[i]) continue;
        RM_InfoBeginDictField(ictx, rl_commands[i].info_name);
        RM_InfoAddFieldULongLong(ictx, "calls", rl_stats[i].calls);
        RM_InfoAddFieldULongLong(ictx, "admitted", rl_stats[i].admitted);
        RM_InfoAddFieldULongLong(ictx, "refused", rl_stats[i].refused);
        RM_InfoAddFieldULongLong(ictx, "errors", rl_stats[i].errors);
        RM_InfoEndDictField(ictx);
    }
}

/* ---- Load and unload ---- */

static int rl_parse_module_args(RedisModuleCtx *ctx, RedisModuleString **argv, int argc) {
    for (int i = 0; i < argc; i += 2) {
        size_t len;
        const char *name = RM_StringPtrLen(argv[i], &len);
        const char *value = i + 1 < argc ? RM_StringPtrLen(argv[i + 1], &len) : NULL;
        if (strcasecmp(name, "CL_ALIAS") == 0 && value != NULL &&
            (strcasecmp(value, "yes") == 0 || strcasecmp(value, "no") == 0)) {
            rl_alias_on = strcasecmp(value, "yes") == 0;
            continue;
        }
        RM_Log(ctx, "warning",
               "ratelimit: unknown module argument '%s'; accepted: CL_ALIAS yes|no (default yes)", name);
        return REDISMODULE_ERR;
    }
    return REDISMODULE_OK;
}

static int rl_register(RedisModuleCtx *ctx, int i) {
    const rl_command_def *def = &rl_commands[i];
    const char *flags = def->readonly ? "readonly fast" : "write deny-oom fast";
    if (RM_CreateCommand(ctx, def->name, rl_handlers[i], flags, 1, 1, 1) != REDISMODULE_OK) {
        RM_Log(ctx, "warning", "ratelimit: cannot register %s (is another module using the name?)", def->name);
        return REDISMODULE_ERR;
    }
    rl_registered[i] = 1;
    RedisModuleCommand *cmd = RM_GetCommand ? RM_GetCommand(ctx, def->name) : NULL;
    if (cmd == NULL) return REDISMODULE_OK;
    if (RM_SetCommandInfo) {
        RedisModuleCommandInfo info = {
            .version = &rl_info_version,
            .summary = def->summary,
            .complexity = def->complexity,
            .since = "1.0.0",
            .arity = def->arity,
            .key_specs = def->readonly ? rl_keys_read : rl_keys_write,
            .args = def->args,
        };
        if (RM_SetCommandInfo(cmd, &info) != REDISMODULE_OK) {
            RM_Log(ctx, "warning", "ratelimit: SetCommandInfo failed for %s", def->name);
            return REDISMODULE_ERR;
        }
    }
    if (RM_SetCommandACLCategories) {
        const char *cats = def->readonly ? (rl_category_on ? RL_ACL_CATEGORY " read fast" : "read fast")
                                         : (rl_category_on ? RL_ACL_CATEGORY " write fast" : "write fast");
        if (RM_SetCommandACLCategories(cmd, cats) != REDISMODULE_OK) {
            RM_Log(ctx, "warning", "ratelimit: SetCommandACLCategories failed for %s", def->name);
            return REDISMODULE_ERR;
        }
    }
    return REDISMODULE_OK;
}

/* The library is linked with -z nodelete, so a load that fails here (and is
 * dlclose()d by the server) never unmaps the running Go runtime. */
int RedisModule_OnLoad(RedisModuleCtx *ctx, RedisModuleString **argv, int argc) {
    const char *missing = rl_load_api(ctx);
    if (missing != NULL) {
        if (RM_Log) RM_Log(ctx, "warning", "ratelimit: the server lacks RedisModule_%s", missing);
        return REDISMODULE_ERR;
    }
    if (RM_IsModuleNameBusy && RM_IsModuleNameBusy(RL_MODULE_NAME)) {
        RM_Log(ctx, "warning", "ratelimit: a module named %s is already loaded", RL_MODULE_NAME);
        return REDISMODULE_ERR;
    }
    RM_SetModuleAttribs(ctx, RL_MODULE_NAME, RL_MODULE_VERSION, REDISMODULE_APIVER_1);
    if (rl_pxat == NULL) rl_pxat = RM_CreateString(NULL, "PXAT", 4); /* kept for the process's life */
    if (rl_parse_module_args(ctx, argv, argc) != REDISMODULE_OK) return REDISMODULE_ERR;

    /* A key opened for writing is signalled as modified only when written,
     * so a refused call does not break WATCH. */
    RM_SetModuleOptions(ctx, REDISMODULE_OPTION_NO_IMPLICIT_SIGNAL_MODIFIED);

    rl_category_on = RM_AddACLCategory != NULL && RM_SetCommandACLCategories != NULL &&
                     (RM_AddACLCategory(ctx, RL_ACL_CATEGORY) == REDISMODULE_OK || errno == EBUSY);

    for (int i = 0; i < RL_NCOMMANDS; i++) {
        if (rl_commands[i].alias && !rl_alias_on) continue;
        if (rl_register(ctx, i) != REDISMODULE_OK) return REDISMODULE_ERR;
    }
    if (RM_RegisterInfoFunc(ctx, rl_info) != REDISMODULE_OK) return REDISMODULE_ERR;

    int procs = rlInit();
    int v = RM_GetServerVersion ? RM_GetServerVersion() : 0;
    RM_Log(ctx, "notice",
           "ratelimit %d loaded: server %d.%d.%d, clock %s, CL.THROTTLE alias %s, ACL category %s, GOMAXPROCS %d",
           RL_MODULE_VERSION, (v >> 16) & 0xff, (v >> 8) & 0xff, v & 0xff, rl_clock_name(),
           rl_alias_on ? "on" : "off", rl_category_on ? RL_ACL_CATEGORY : "unsupported", procs);
    return REDISMODULE_OK;
}

/* A Go runtime cannot be unloaded: MODULE UNLOAD is refused. */
int RedisModule_OnUnload(RedisModuleCtx *ctx) {
    if (RM_Log) RM_Log(ctx, "warning", "ratelimit: a Go module cannot be unloaded; restart the server instead");
    return REDISMODULE_ERR;
}
