/*
 * commands.c: the command table: every command's name, flags, key specs,
 * arity and the arguments COMMAND DOCS describes.
 */
#include "module.h"

RedisModuleCommandInfoVersion rl_info_version = {
    1, sizeof(RedisModuleCommandHistoryEntry), sizeof(RedisModuleCommandKeySpec),
    sizeof(RedisModuleCommandArg)};


/* A key spec list of one spec searching from argument 1; the rest of the
 * arguments say how the keys are found from there. */
#define RL_KEY_SPEC(notes_, flags_, ...)                                                              \
    {{.notes = notes_, .flags = flags_, .begin_search_type = REDISMODULE_KSPEC_BS_INDEX, .bs.index.pos = 1, \
      __VA_ARGS__},                                                                                     \
     {0}}

/* The key is argument 1 and the only key. */
#define RL_ONE_KEY .find_keys_type = REDISMODULE_KSPEC_FK_RANGE, .fk.range = {0, 1, 0}
RedisModuleCommandKeySpec rl_keys_write[] = RL_KEY_SPEC("the limiter's state", RL_KEYS_RW, RL_ONE_KEY);
RedisModuleCommandKeySpec rl_keys_read[] = RL_KEY_SPEC("the limiter's state", RL_KEYS_RO, RL_ONE_KEY);

/* RL.ALL, RL.PEEK: argument 1 is numkeys, the keys follow it. */
#define RL_NUMKEYS .find_keys_type = REDISMODULE_KSPEC_FK_KEYNUM, .fk.keynum = {0, 1, 1}
RedisModuleCommandKeySpec rl_keys_all_write[] =
    RL_KEY_SPEC("the limits' states, one key per limiter", RL_KEYS_RW, RL_NUMKEYS);
RedisModuleCommandKeySpec rl_keys_all_read[] =
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



const rl_command_def rl_commands[] = {
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
const int rl_ncommands = (int)(sizeof(rl_commands) / sizeof(rl_commands[0]));
_Static_assert(sizeof(rl_commands) / sizeof(rl_commands[0]) <= RL_MAX_COMMANDS, "RL_MAX_COMMANDS: one handler per command");
