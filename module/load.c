/*
 * load.c: loading the module: the API, the module's arguments, registering
 * every command of the table with its key specs, docs and ACL categories,
 * INFO ratelimit, and refusing MODULE UNLOAD.
 */
#include <errno.h>
#include <strings.h>

#define RL_API_DEFINE /* this file owns the RM_* pointers and loads them */
#include "module.h"
#include "_cgo_export.h"

static int rl_registered[RL_NCOMMANDS];
static int rl_alias_on = 1;
static int rl_category_on = 0;

/* ---- INFO ratelimit ---- */

static const char *rl_clock_name(void) {
    return RM_CachedMicroseconds ? "cached-command-time" : "wall-clock-ms";
}

static void rl_info(RedisModuleInfoCtx *ictx, int for_crash_report) {
    if (RM_InfoAddSection(ictx, "") != REDISMODULE_OK) return;
    RM_InfoAddFieldCString(ictx, "version", RL_VERSION);
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
    } else if (def->limits && RM_IsKeysPositionRequest != NULL && RM_KeyAtPos != NULL) {
        /* A LIMITS hash is a key too, anywhere among the options: the
         * command reports it (for Cluster's slot check, as RL.ALL's). A
         * server without the key-position calls runs it unchecked. */
        flags = def->readonly ? "readonly fast getkeys-api" : "write deny-oom fast getkeys-api";
    }
    int key = def->numkeys ? 0 : 1;
    if (RM_CreateCommand(ctx, def->name, rl_handlers[i], flags, key, def->hold ? 2 : key, key) != REDISMODULE_OK) {
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
                         : def->hold  ? rl_keys_hold
                         : def->limits ? (def->readonly ? rl_keys_limits_read : rl_keys_limits_write)
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
           "ratelimit %s loaded: server %d.%d.%d, clock %s, CL.THROTTLE alias %s, ACL category %s, GOMAXPROCS %d",
           RL_VERSION, (v >> 16) & 0xff, (v >> 8) & 0xff, v & 0xff, rl_clock_name(),
           rl_alias_on ? "on" : "off", rl_category_on ? RL_ACL_CATEGORY : "unsupported", procs);
    return REDISMODULE_OK;
}

/* A Go runtime cannot be unloaded: MODULE UNLOAD is refused. */
int RedisModule_OnUnload(RedisModuleCtx *ctx) {
    if (RM_Log) RM_Log(ctx, "warning", "ratelimit: a Go module cannot be unloaded; restart the server instead");
    return REDISMODULE_ERR;
}
