/*
 * shim.c: everything that talks to the server. It loads the API, registers
 * the commands from one table, and runs each command the same way:
 *
 *   collect the arguments, open every key the command names, read each
 *   one's state and the clock -> Go parses, computes and decides -> C writes
 *   each key with an absolute expiry, replicates the effects, replies, counts.
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

/* What a consuming command and a peek do to their keys, in key specs and
 * in the keys RL.ALL reports. */
#define RL_KEYS_RW (REDISMODULE_CMD_KEY_RW | REDISMODULE_CMD_KEY_ACCESS | REDISMODULE_CMD_KEY_UPDATE)
#define RL_KEYS_RO (REDISMODULE_CMD_KEY_RO | REDISMODULE_CMD_KEY_ACCESS)

/* A key spec list of one spec searching from argument 1; the rest of the
 * arguments say how the keys are found from there. */
#define RL_KEY_SPEC(notes_, flags_, ...)                                                              \
    {{.notes = notes_, .flags = flags_, .begin_search_type = REDISMODULE_KSPEC_BS_INDEX, .bs.index.pos = 1, \
      __VA_ARGS__},                                                                                     \
     {0}}

/* The key is argument 1 and the only key. */
#define RL_ONE_KEY .find_keys_type = REDISMODULE_KSPEC_FK_RANGE, .fk.range = {0, 1, 0}
static RedisModuleCommandKeySpec rl_keys_write[] = RL_KEY_SPEC("the limiter's state", RL_KEYS_RW, RL_ONE_KEY);
static RedisModuleCommandKeySpec rl_keys_read[] = RL_KEY_SPEC("the limiter's state", RL_KEYS_RO, RL_ONE_KEY);

/* RL.ALL, RL.PEEK: argument 1 is numkeys, the keys follow it. */
#define RL_NUMKEYS .find_keys_type = REDISMODULE_KSPEC_FK_KEYNUM, .fk.keynum = {0, 1, 1}
static RedisModuleCommandKeySpec rl_keys_all_write[] =
    RL_KEY_SPEC("the limits' states, one key per limiter", RL_KEYS_RW, RL_NUMKEYS);
static RedisModuleCommandKeySpec rl_keys_all_read[] =
    RL_KEY_SPEC("the limits' states, one key per limiter", RL_KEYS_RO, RL_NUMKEYS);

#define RL_KEY_ARG {.name = "key", .type = REDISMODULE_ARG_TYPE_KEY, .key_spec_index = 0}
#define RL_INT_ARG(n, s) {.name = n, .type = REDISMODULE_ARG_TYPE_INTEGER, .key_spec_index = -1, .summary = s}
#define RL_OPT_INT_ARG(n, s)                                                               \
    {.name = n, .type = REDISMODULE_ARG_TYPE_INTEGER, .key_spec_index = -1, .summary = s, \
     .flags = REDISMODULE_CMD_ARG_OPTIONAL}
#define RL_MS_ARG                                                                                   \
    {.name = "ms", .type = REDISMODULE_ARG_TYPE_PURE_TOKEN, .key_spec_index = -1, .token = "MS",  \
     .summary = "reply times in milliseconds, rounded up", .flags = REDISMODULE_CMD_ARG_OPTIONAL}

#define RL_RESERVE_ARG                                                                              \
    {.name = "reserve", .type = REDISMODULE_ARG_TYPE_INTEGER, .key_spec_index = -1, .token = "RESERVE", \
     .summary = "admit only if this many units remain after the call (0 to the limit)",                \
     .flags = REDISMODULE_CMD_ARG_OPTIONAL}

static RedisModuleCommandArg rl_gcra_args[] = {
    RL_KEY_ARG,
    RL_INT_ARG("max_burst", "extra requests allowed at once: the limit is max_burst + 1 (0 or more)"),
    RL_INT_ARG("count", "requests admitted per period (1 or more)"),
    RL_INT_ARG("period", "the period in whole seconds (1 to 9223372036)"),
    RL_OPT_INT_ARG("quantity", "the cost of this call, default 1; 0 reports, negative gives back"),
    RL_MS_ARG,
    RL_RESERVE_ARG,
    {0}};

static RedisModuleCommandArg rl_tb_args[] = {
    RL_KEY_ARG,
    RL_INT_ARG("capacity", "the most tokens the bucket holds; it starts full (1 or more)"),
    RL_INT_ARG("refill_tokens", "tokens added per refill_period, continuously (1 or more)"),
    RL_INT_ARG("refill_period", "the refill period in whole seconds (1 to 9223372036)"),
    RL_OPT_INT_ARG("tokens", "tokens to take, default 1; 0 reports, negative puts back"),
    RL_MS_ARG,
    RL_RESERVE_ARG,
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
     RL_RESERVE_ARG,                                                                                \
     {0}}

static RedisModuleCommandArg rl_window_args[] = RL_WINDOW_ARGS("hits admitted per window (1 or more)");
static RedisModuleCommandArg rl_log_args[] = RL_WINDOW_ARGS("hits admitted per window (1 to 100000)");

static RedisModuleCommandArg rl_all_args[] = {
    RL_INT_ARG("numkeys", "how many keys, and limiters, follow (1 to 16)"),
    {.name = "key", .type = REDISMODULE_ARG_TYPE_KEY, .key_spec_index = 0, .flags = REDISMODULE_CMD_ARG_MULTIPLE},
    {.name = "limiter",
     .type = REDISMODULE_ARG_TYPE_STRING,
     .key_spec_index = -1,
     .summary = "one per key, in order: GCRA max_burst count period quantity | TB capacity refill_tokens "
                "refill_period tokens | SW limit window cost | FW limit window cost | SL limit window cost",
     .flags = REDISMODULE_CMD_ARG_MULTIPLE},
    RL_MS_ARG,
    RL_RESERVE_ARG,
    {.name = "each", .type = REDISMODULE_ARG_TYPE_PURE_TOKEN, .key_spec_index = -1, .token = "EACH",
     .summary = "after the six integers, every limit's own five, in order", .flags = REDISMODULE_CMD_ARG_OPTIONAL},
    {0}};

static RedisModuleCommandArg rl_conc_acquire_args[] = {
    RL_KEY_ARG,
    RL_INT_ARG("limit", "the most holders at once (1 to 100000)"),
    RL_INT_ARG("lease", "whole seconds a slot stays held after the last acquire, unless released (1 or more)"),
    {.name = "id", .type = REDISMODULE_ARG_TYPE_STRING, .key_spec_index = -1,
     .summary = "the holder, 1 to 128 bytes (a request id); acquiring again renews its lease"},
    RL_MS_ARG,
    RL_RESERVE_ARG,
    {0}};

static RedisModuleCommandArg rl_conc_release_args[] = {
    RL_KEY_ARG,
    {.name = "id", .type = REDISMODULE_ARG_TYPE_STRING, .key_spec_index = -1,
     .summary = "the holder whose slot is freed, 1 to 128 bytes"},
    {0}};

static RedisModuleCommandArg rl_conc_peek_args[] = {
    RL_KEY_ARG,
    RL_INT_ARG("limit", "the most holders at once (1 to 100000)"),
    RL_MS_ARG,
    RL_RESERVE_ARG,
    {0}};

typedef struct {
    const char *name;      /* as registered */
    const char *info_name; /* its INFO field */
    int op;                /* enum rl_op */
    int readonly;          /* a peek: readonly, opens its keys for reading only */
    int alias;             /* registered only while the CL.THROTTLE alias is on */
    int numkeys;           /* the keys follow numkeys at argument 1 (else the key is argument 1) */
    int frees;             /* only frees memory: allowed past maxmemory (no deny-oom) */
    int arity;
    const char *summary;
    const char *complexity;
    RedisModuleCommandArg *args;
} rl_command_def;

static const rl_command_def rl_commands[] = {
    {"gcra.throttle", "gcra_throttle", RL_OP_GCRA_THROTTLE, 0, 0, 0, 0, -5,
     "GCRA rate limit: admit or refuse a request of the given cost, redis-cell's CL.THROTTLE reply", "O(1)",
     rl_gcra_args},
    {"cl.throttle", "cl_throttle", RL_OP_GCRA_THROTTLE, 0, 1, 0, 0, -5,
     "redis-cell compatible alias of GCRA.THROTTLE", "O(1)", rl_gcra_args},
    {"gcra.peek", "gcra_peek", RL_OP_GCRA_PEEK, 1, 0, 0, 0, -5,
     "What GCRA.THROTTLE would reply now, changing nothing", "O(1)", rl_gcra_args},
    {"tb.take", "tb_take", RL_OP_TB_TAKE, 0, 0, 0, 0, -5,
     "Token bucket: take tokens when all are available; reply limited, capacity, tokens left, retry, full in",
     "O(1)", rl_tb_args},
    {"tb.peek", "tb_peek", RL_OP_TB_PEEK, 1, 0, 0, 0, -5, "What TB.TAKE would reply now, changing nothing", "O(1)",
     rl_tb_args},
    {"lb.enqueue", "lb_enqueue", RL_OP_LB_ENQUEUE, 0, 0, 0, 0, -5,
     "Leaky-bucket shaper: queue a request; reply limited, capacity, free places, retry, delay before it goes",
     "O(1)", rl_lb_args},
    {"lb.peek", "lb_peek", RL_OP_LB_PEEK, 1, 0, 0, 0, -5, "What LB.ENQUEUE would reply now, changing nothing", "O(1)",
     rl_lb_args},
    {"sw.hit", "sw_hit", RL_OP_SW_HIT, 0, 0, 0, 0, -4,
     "Sliding window counter: the previous window weighted by its overlap plus the current one", "O(1)",
     rl_window_args},
    {"sw.peek", "sw_peek", RL_OP_SW_PEEK, 1, 0, 0, 0, -4, "What SW.HIT would reply now, changing nothing", "O(1)",
     rl_window_args},
    {"fw.hit", "fw_hit", RL_OP_FW_HIT, 0, 0, 0, 0, -4,
     "Fixed window aligned to the epoch: the cheapest, admits up to twice the limit across a boundary", "O(1)",
     rl_window_args},
    {"fw.peek", "fw_peek", RL_OP_FW_PEEK, 1, 0, 0, 0, -4, "What FW.HIT would reply now, changing nothing", "O(1)",
     rl_window_args},
    {"sl.hit", "sl_hit", RL_OP_SL_HIT, 0, 0, 0, 0, -4,
     "Sliding log: the exact count of hits in the trailing window, in a sorted set", "O(log N + M)",
     rl_log_args},
    {"sl.peek", "sl_peek", RL_OP_SL_PEEK, 1, 0, 0, 0, -4, "What SL.HIT would reply now, changing nothing", "O(log N + M)",
     rl_log_args},
    {"rl.all", "rl_all", RL_OP_RL_ALL, 0, 0, 1, 0, -2,
     "Several limits in one atomic decision: every limit admits or nothing is written; replies the deciding "
     "limit's five integers and its position",
     "O(N) for N keys, O(log N + M) per sliding log", rl_all_args},
    {"rl.peek", "rl_peek", RL_OP_RL_PEEK, 1, 0, 1, 0, -2, "What RL.ALL would reply now, changing nothing",
     "O(N) for N keys, O(log N + M) per sliding log", rl_all_args},
    {"conc.acquire", "conc_acquire", RL_OP_CONC_ACQUIRE, 0, 0, 0, 0, -5,
     "Concurrency limit: take a slot for id, or renew its lease; reply limited, limit, free slots, retry, reset",
     "O(log N), plus up to 64 lapsed holders removed; O(log N + K) when refused, K the leases that must lapse",
     rl_conc_acquire_args},
    {"conc.release", "conc_release", RL_OP_CONC_RELEASE, 0, 0, 0, 1, 3,
     "Free id's slot at once: 1 if it held one, else 0", "O(log N), plus up to 64 lapsed holders removed",
     rl_conc_release_args},
    {"conc.peek", "conc_peek", RL_OP_CONC_PEEK, 1, 0, 0, 0, -3,
     "What CONC.ACQUIRE by a new id would reply now, changing nothing", "O(log N + K)", rl_conc_peek_args},
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

/* ---- Sliding log: a sorted set of entries scored in Unix microseconds ---- */

long long rl_zlog_count(rl_key *k, long long after_us) {
    RedisModuleKey *key = (RedisModuleKey *)k->key;
    if (k->kind != RL_KEY_ZSET) return 0;
    long long gone = 0;
    if (RM_ZsetFirstInScoreRange(key, -INFINITY, (double)after_us, 0, 0) == REDISMODULE_OK) {
        if (!RM_ZsetRangeEndReached(key)) {
            do gone++;
            while (RM_ZsetRangeNext(key));
        }
        RM_ZsetRangeStop(key);
    }
    return k->z_len - gone;
}

double rl_zlog_nth(rl_key *k, long long after_us, long long k_th) {
    RedisModuleKey *key = (RedisModuleKey *)k->key;
    double score = -INFINITY;
    if (k->kind != RL_KEY_ZSET || k_th < 1) return -INFINITY;
    if (RM_ZsetFirstInScoreRange(key, (double)after_us, INFINITY, 1, 0) != REDISMODULE_OK) return -INFINITY;
    int there = !RM_ZsetRangeEndReached(key);
    for (long long i = 1; there && i < k_th; i++) there = RM_ZsetRangeNext(key);
    RedisModuleString *e = there ? RM_ZsetRangeCurrentElement(key, &score) : NULL;
    RM_ZsetRangeStop(key);
    if (e == NULL) return -INFINITY;
    RM_FreeString((RedisModuleCtx *)k->ctx, e);
    return score;
}

/* ---- Concurrency: a sorted set of holder ids scored with their lease's end in Unix µs ---- */

long long rl_conc_count(rl_key *k, long long after_us) {
    RedisModuleKey *key = (RedisModuleKey *)k->key;
    if (k->kind != RL_KEY_ZSET) return 0;
    long long gone = 0;
    int more = 0;
    if (RM_ZsetFirstInScoreRange(key, -INFINITY, (double)after_us, 0, 0) == REDISMODULE_OK) {
        int there = !RM_ZsetRangeEndReached(key);
        while (there && gone < RL_CONC_SWEEP) {
            gone++;
            there = RM_ZsetRangeNext(key);
        }
        more = there;
        RM_ZsetRangeStop(key);
    }
    k->conc_swept = more ? -1 : gone;
    k->conc_swept_at = after_us;
    if (!more) return k->z_len - gone;
    /* More lapsed holders than a write sweeps: the server's own ZCOUNT
     * counts them in O(log N), where stepping over them would be O(N). */
    char max[24];
    snprintf(max, sizeof max, "%lld", after_us);
    RedisModuleCallReply *r = RM_Call((RedisModuleCtx *)k->ctx, "ZCOUNT", "scc", (RedisModuleString *)k->name, "-inf", max);
    if (r == NULL) return k->z_len - gone; /* counts the rest as live: refuses rather than over-admits */
    if (RM_CallReplyType(r) == REDISMODULE_REPLY_INTEGER) gone = RM_CallReplyInteger(r);
    RM_FreeCallReply(r);
    return k->z_len - gone;
}

/* Whether sorted-set member m is the len bytes at id; frees m. */
static int rl_member_is(RedisModuleCtx *ctx, RedisModuleString *m, const char *id, size_t len) {
    size_t mlen = 0;
    const char *p = RM_StringPtrLen(m, &mlen);
    int same = mlen == len && memcmp(p, id, len) == 0;
    RM_FreeString(ctx, m);
    return same;
}

rl_holder rl_conc_holder(rl_key *k, const char *id, size_t len) {
    RedisModuleKey *key = (RedisModuleKey *)k->key;
    RedisModuleCtx *ctx = (RedisModuleCtx *)k->ctx;
    rl_holder h = {-INFINITY, -INFINITY};
    if (k->kind != RL_KEY_ZSET) return h;
    if (k->id == NULL) k->id = RM_CreateString(ctx, id, len); /* kept for the write */
    /* Is id the newest member, read with the key? Its copy is cut at
     * RL_MEMBER_MAX - 1 bytes: a longer id that matches it is looked up. */
    int newest = k->z_newest_len == len && len < RL_MEMBER_MAX && memcmp(k->z_newest_member, id, len) == 0;
    if (!newest) {
        /* The common case: id is elsewhere or absent, the newest is another's. */
        if (RM_ZsetScore(key, (RedisModuleString *)k->id, &h.own) != REDISMODULE_OK) h.own = -INFINITY;
        size_t cut = len < RL_MEMBER_MAX - 1 ? len : RL_MEMBER_MAX - 1;
        if (k->z_newest_len != len || memcmp(k->z_newest_member, id, cut) != 0) {
            h.latest = k->z_newest;
            return h;
        }
    }
    /* id is the newest (a release soon after its acquire, a renewal): its
     * score is the newest's, found without a lookup (a compact set's lookup
     * scans every entry), and the latest other is the one before it. */
    if (RM_ZsetLastInScoreRange(key, -INFINITY, INFINITY, 0, 0) != REDISMODULE_OK) return h;
    int there = !RM_ZsetRangeEndReached(key);
    double score = -INFINITY;
    if (there && rl_member_is(ctx, RM_ZsetRangeCurrentElement(key, &score), id, len)) {
        h.own = score;
        there = RM_ZsetRangePrev(key);
        if (there) RM_FreeString(ctx, RM_ZsetRangeCurrentElement(key, &score));
    } else if (newest && RM_ZsetScore(key, (RedisModuleString *)k->id, &h.own) != REDISMODULE_OK) {
        h.own = -INFINITY; /* never: the newest was id when the key was read */
    }
    if (there) h.latest = score;
    RM_ZsetRangeStop(key);
    return h;
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

#define RL_ZBATCH 64 /* members per replicated ZADD */

/* Removes the entries scored within [min, max] (the bounds as
 * ZREMRANGEBYSCORE takes them, exclusive when minex), replicates that, and
 * emits the events ZREMRANGEBYSCORE emits: zremrangebyscore, then del if
 * the set is gone. Returns how many it removed. */
static long long rl_zlog_remove(RedisModuleCtx *ctx, rl_key *k, double min, int minex, double max,
                                const char *rmin, const char *rmax) {
    RedisModuleKey *key = (RedisModuleKey *)k->key;
    RedisModuleString *name = (RedisModuleString *)k->name;
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
static void rl_zlog_write(RedisModuleCtx *ctx, rl_key *k) {
    RedisModuleKey *key = (RedisModuleKey *)k->key;
    RedisModuleString *name = (RedisModuleString *)k->name;
    RedisModuleString *batch[2 * RL_ZBATCH];
    char score[24], member[48];
    int slen = snprintf(score, sizeof score, "%lld", k->z_score_us);

    char cutoff[24];
    snprintf(cutoff, sizeof cutoff, "%lld", k->z_cutoff_us);
    rl_zlog_remove(ctx, k, -INFINITY, 0, (double)k->z_cutoff_us, "-inf", cutoff);
    long long moved = 0;
    if (k->z_redate) {
        char after[26];
        snprintf(after, sizeof after, "(%lld", k->z_score_us);
        moved = rl_zlog_remove(ctx, k, (double)k->z_score_us, 1, INFINITY, after, "+inf");
    }

    long long seq = (long long)RM_ValueLength(key), total = k->z_add + moved;
    int n = 0;
    for (long long added = 0; added < total;) {
        int mlen = snprintf(member, sizeof member, "%s-%lld", score, seq++);
        RedisModuleString *m = RM_CreateString(ctx, member, (size_t)mlen);
        int flags = REDISMODULE_ZADD_NX;
        RM_ZsetAdd(key, (double)k->z_score_us, m, &flags);
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
    RM_SetAbsExpire(key, k->expire_ms);
    RM_Replicate(ctx, "PEXPIREAT", "sl", name, k->expire_ms);
    RM_NotifyKeyspaceEvent(ctx, REDISMODULE_NOTIFY_GENERIC, "expire", name);
    RM_SignalModifiedKey(ctx, name);
}

/* A concurrency write: remove up to RL_CONC_SWEEP lapsed holders (scored
 * at or below z_cutoff_us; the caller is left to the next step), then add
 * the caller scored z_score_us or remove it, then expire the key at
 * expire_ms, its latest lease. Replicated as ZREM, ZADD and PEXPIREAT, with
 * the events they emit on a replica. */
static void rl_conc_write(RedisModuleCtx *ctx, rl_call *c, rl_key *k) {
    RedisModuleKey *key = (RedisModuleKey *)k->key;
    RedisModuleString *name = (RedisModuleString *)k->name;
    const rl_arg *id = &c->argv[k->conc_id_arg];
    RedisModuleString *idstr = k->id ? (RedisModuleString *)k->id : RM_CreateString(ctx, id->ptr, id->len);
    k->id = idstr; /* freed with the key */
    long long expires = k->expire_at_ms;
    RedisModuleString *gone[RL_CONC_SWEEP + 1];
    int n = 0;
    /* (The count at this cutoff, when it ran and found none, spares the look.) */
    int none = k->conc_swept == 0 && k->conc_swept_at == k->z_cutoff_us;
    if (!none && RM_KeyType(key) == REDISMODULE_KEYTYPE_ZSET &&
        RM_ZsetFirstInScoreRange(key, -INFINITY, (double)k->z_cutoff_us, 0, 0) == REDISMODULE_OK) {
        while (!RM_ZsetRangeEndReached(key) && n < RL_CONC_SWEEP) {
            RedisModuleString *m = RM_ZsetRangeCurrentElement(key, NULL);
            size_t mlen = 0;
            const char *p = RM_StringPtrLen(m, &mlen);
            if (mlen == id->len && memcmp(p, id->ptr, mlen) == 0) RM_FreeString(ctx, m);
            else gone[n++] = m;
            if (!RM_ZsetRangeNext(key)) break;
        }
        RM_ZsetRangeStop(key);
    }
    if (k->conc_remove) gone[n++] = idstr;
    for (int i = 0; i < n; i++) RM_ZsetRem(key, gone[i], NULL);
    if (n > 0) {
        RM_Replicate(ctx, "ZREM", "sv", name, gone, (size_t)n);
        RM_NotifyKeyspaceEvent(ctx, REDISMODULE_NOTIFY_ZSET, "zrem", name);
        if (RM_KeyType(key) == REDISMODULE_KEYTYPE_EMPTY) { /* the API deletes an emptied set */
            RM_NotifyKeyspaceEvent(ctx, REDISMODULE_NOTIFY_GENERIC, "del", name);
            expires = REDISMODULE_NO_EXPIRE;
        }
    }
    for (int i = 0; i < n; i++)
        if (gone[i] != idstr) RM_FreeString(ctx, gone[i]);
    if (k->conc_add) {
        int flags = 0;
        RM_ZsetAdd(key, (double)k->z_score_us, idstr, &flags);
        RM_Replicate(ctx, "ZADD", "sls", name, k->z_score_us, idstr);
        RM_NotifyKeyspaceEvent(ctx, REDISMODULE_NOTIFY_ZSET, "zadd", name);
    }
    if (RM_KeyType(key) == REDISMODULE_KEYTYPE_ZSET && expires != k->expire_ms) {
        RM_SetAbsExpire(key, k->expire_ms);
        RM_Replicate(ctx, "PEXPIREAT", "sl", name, k->expire_ms);
        RM_NotifyKeyspaceEvent(ctx, REDISMODULE_NOTIFY_GENERIC, "expire", name);
    }
    RM_SignalModifiedKey(ctx, name);
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

/* RL.ALL's keys for the server, which asks the command itself (the
 * getkeys-api flag): Redis Cluster finds a command's keys through this
 * callback or the legacy first/last/step, never through a keynum key spec,
 * so without it the cluster would neither redirect RL.ALL nor refuse keys
 * of several slots. */
static int rl_report_keys(RedisModuleCtx *ctx, const rl_command_def *def, RedisModuleString **argv, int argc) {
    size_t len = 0;
    const char *p = argc >= 2 ? RM_StringPtrLen(argv[1], &len) : NULL;
    int nkeys = p ? rl_numkeys(p, len, argc) : 0;
    int flags = (int)(def->readonly ? RL_KEYS_RO : RL_KEYS_RW);
    for (int i = 0; i < nkeys; i++) {
        if (RM_KeyAtPosWithFlags) RM_KeyAtPosWithFlags(ctx, 2 + i, flags);
        else RM_KeyAtPos(ctx, 2 + i);
    }
    return REDISMODULE_OK;
}

static int rl_command(RedisModuleCtx *ctx, RedisModuleString **argv, int argc, int idx) {
    const rl_command_def *def = &rl_commands[idx];
    if (def->numkeys && RM_IsKeysPositionRequest(ctx)) return rl_report_keys(ctx, def, argv, argc);
    rl_counters *n = &rl_stats[idx];
    n->calls++;
    if (argc > RL_MAX_ARGS || argc < 2) {
        n->errors++;
        return RM_WrongArity(ctx);
    }
    rl_call c;
    c.op = def->op;
    c.argc = argc;
    for (int i = 0; i < argc; i++) c.argv[i].ptr = RM_StringPtrLen(argv[i], &c.argv[i].len);
    c.action = RL_ACT_ERROR;
    c.reply_len = 5;
    c.err[0] = '\0';
    c.ctx = ctx;

    /* Every key, then the clock: one read each, before the one crossing. */
    c.nkeys = def->numkeys ? rl_numkeys(c.argv[1].ptr, c.argv[1].len, argc) : 1;
    int first = def->numkeys ? 2 : 1;
    for (int i = 0; i < c.nkeys; i++) rl_read_key(ctx, &c.keys[i], argv[first + i], def->readonly);
    c.now_ns = rl_now_ns();

    rlExecute(&c);

    rl_finish(ctx, &c, def, n);
    for (int i = 0; i < c.nkeys; i++) {
        if (c.keys[i].id) RM_FreeString(ctx, (RedisModuleString *)c.keys[i].id);
        if (c.keys[i].key) RM_CloseKey((RedisModuleKey *)c.keys[i].key);
    }
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
RL_HANDLER(16)
RL_HANDLER(17)
RL_HANDLER(18)
RL_HANDLER(19)
static const RedisModuleCmdFunc rl_handlers[] = {
    rl_handler_0,  rl_handler_1,  rl_handler_2,  rl_handler_3,  rl_handler_4,  rl_handler_5,  rl_handler_6,
    rl_handler_7,  rl_handler_8,  rl_handler_9,  rl_handler_10, rl_handler_11, rl_handler_12, rl_handler_13,
    rl_handler_14, rl_handler_15, rl_handler_16, rl_handler_17, rl_handler_18, rl_handler_19};
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
    const char *flags = def->readonly ? "readonly fast" : def->frees ? "write fast" : "write deny-oom fast";
    /* RL.ALL's keys follow numkeys: its key specs say where (for COMMAND
     * INFO, GETKEYS and ACLs), and the command reports them itself
     * (getkeys-api, for Cluster), which needs SetCommandInfo and the
     * key-position calls (Redis 7.0+, Valkey). */
    if (def->numkeys) {
        if (RM_SetCommandInfo == NULL || RM_IsKeysPositionRequest == NULL || RM_KeyAtPos == NULL) {
            RM_Log(ctx, "warning", "ratelimit: %s not registered: the server cannot describe its keys", def->name);
            return REDISMODULE_OK;
        }
        flags = def->readonly ? "readonly fast getkeys-api" : "write deny-oom fast getkeys-api";
    }
    int key = def->numkeys ? 0 : 1;
    if (RM_CreateCommand(ctx, def->name, rl_handlers[i], flags, key, key, key) != REDISMODULE_OK) {
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
            .key_specs = def->numkeys ? (def->readonly ? rl_keys_all_read : rl_keys_all_write)
                                      : (def->readonly ? rl_keys_read : rl_keys_write),
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
