/*
 * module.h: what the module's C files share (shim.h is what Go shares with
 * them): the command table (commands_gen.c, written by go generate from
 * internal/spec), the call protocol (call.c), the
 * sorted-set store (zset.c), and load, registration and INFO (load.c).
 */
#ifndef RL_MODULE_H
#define RL_MODULE_H

#include "rmapi.h" /* the API: one RM_* pointer per function, rl_load_api, rl_now_ns */
#include "shim.h"
#include "version_gen.h"

#define RL_MODULE_NAME "ratelimit"
/* RL_VERSION and RL_MODULE_VERSION (MODULE LIST "ver") are in version_gen.h. */
#define RL_ACL_CATEGORY "ratelimit"

/* What a consuming command and a peek do to their keys, in key specs and
 * in the keys RL.ALL reports. */
#define RL_KEYS_RW (REDISMODULE_CMD_KEY_RW | REDISMODULE_CMD_KEY_ACCESS | REDISMODULE_CMD_KEY_UPDATE)
#define RL_KEYS_RO (REDISMODULE_CMD_KEY_RO | REDISMODULE_CMD_KEY_ACCESS)

/* One command of the table. */
typedef struct {
    const char *name;      /* as registered */
    const char *info_name; /* its INFO field */
    int readonly;          /* a peek: readonly, opens its keys for reading only */
    int alias;             /* registered only while the CL.THROTTLE alias is on */
    int numkeys;           /* the keys follow numkeys at argument 1 (else the key is argument 1) */
    int hold;              /* a second key, the hold, is argument 2 (RL.HOLD, RL.SETTLE) */
    int frees;             /* only frees memory: allowed past maxmemory (no deny-oom) */
    int limits;            /* takes LIMITS key field: C reads the field before the crossing */
    int arity;
    const char *summary;
    const char *complexity;
    RedisModuleCommandArg *args;
} rl_command_def;

/* The table's rows (RL_NCOMMANDS of them) and each one's entry point. */
extern RL_HIDDEN const rl_command_def rl_commands[RL_NCOMMANDS];
extern RL_HIDDEN const RedisModuleCmdFunc rl_handlers[RL_NCOMMANDS];
extern RL_HIDDEN RedisModuleCommandInfoVersion rl_info_version;
extern RL_HIDDEN RedisModuleCommandKeySpec rl_keys_write[], rl_keys_read[], rl_keys_all_write[], rl_keys_all_read[],
    rl_keys_hold[], rl_keys_limits_write[], rl_keys_limits_read[];

/* Each command's counters, for INFO ratelimit. */
typedef struct {
    unsigned long long calls, admitted, refused, errors;
} rl_counters;
extern RL_HIDDEN rl_counters rl_stats[RL_NCOMMANDS];

/* "PXAT", made once at load: replicating it then allocates nothing. */
extern RL_HIDDEN RedisModuleString *rl_pxat;

/* Runs command idx of the table (call.c). */
RL_HIDDEN int rl_command(RedisModuleCtx *ctx, RedisModuleString **argv, int argc, int idx);

/* The sorted-set writes (zset.c): a sliding log's, a concurrency state's. */
RL_HIDDEN void rl_zlog_write(RedisModuleCtx *ctx, rl_key *k);
RL_HIDDEN void rl_conc_write(RedisModuleCtx *ctx, rl_call *c, rl_key *k);

#endif
