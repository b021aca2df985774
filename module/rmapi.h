/*
 * rmapi.h: the part of the Redis module API this module uses, declared by
 * hand from the module API reference (https://redis.io/docs/latest/develop/
 * reference/modules/modules-api-ref/). Values are the documented ABI; only
 * what the module calls is here.
 *
 * The server hands the API over as a lookup function, the first pointer of
 * the context passed to RedisModule_OnLoad. Each function is looked up by its
 * documented name ("RedisModule_" + name); one the server lacks comes back
 * NULL, which is how features are detected (never by version number).
 */
#ifndef RL_RMAPI_H
#define RL_RMAPI_H

#include <stddef.h>
#include <stdint.h>

#define REDISMODULE_OK 0
#define REDISMODULE_ERR 1
#define REDISMODULE_APIVER_1 1

/* OpenKey modes. */
#define REDISMODULE_READ (1 << 0)
#define REDISMODULE_WRITE (1 << 1)

/* HashGet flags: none, the fields are RedisModuleStrings. */
#define REDISMODULE_HASH_NONE 0

/* KeyType results. */
#define REDISMODULE_KEYTYPE_EMPTY 0
#define REDISMODULE_KEYTYPE_STRING 1
#define REDISMODULE_KEYTYPE_HASH 3
#define REDISMODULE_KEYTYPE_ZSET 5

/* ZsetAdd flags, in and out. */
#define REDISMODULE_ZADD_NX (1 << 1)
#define REDISMODULE_ZADD_ADDED (1 << 2)

#define REDISMODULE_NO_EXPIRE -1

/* CallReplyType results. */
#define REDISMODULE_REPLY_INTEGER 2

/* NotifyKeyspaceEvent classes, as notify-keyspace-events names them. */
#define REDISMODULE_NOTIFY_GENERIC (1 << 2) /* g: del, expire, ... */
#define REDISMODULE_NOTIFY_STRING (1 << 3)  /* $: set, ... */
#define REDISMODULE_NOTIFY_ZSET (1 << 7)    /* z: zadd, zremrangebyscore, ... */

/* SetModuleOptions: CloseKey no longer signals a key opened for writing as
 * modified; the module calls SignalModifiedKey when it really writes. */
#define REDISMODULE_OPTION_NO_IMPLICIT_SIGNAL_MODIFIED (1 << 1)

#define REDISMODULE_ERRORMSG_WRONGTYPE "WRONGTYPE Operation against a key holding the wrong kind of value"

typedef long long mstime_t;
typedef long long ustime_t;

typedef struct RedisModuleCtx RedisModuleCtx;
typedef struct RedisModuleKey RedisModuleKey;
typedef struct RedisModuleString RedisModuleString;
typedef struct RedisModuleCommand RedisModuleCommand;
typedef struct RedisModuleInfoCtx RedisModuleInfoCtx;
typedef struct RedisModuleServerInfoData RedisModuleServerInfoData;
typedef struct RedisModuleCallReply RedisModuleCallReply;

typedef int (*RedisModuleCmdFunc)(RedisModuleCtx *ctx, RedisModuleString **argv, int argc);
typedef void (*RedisModuleInfoFunc)(RedisModuleInfoCtx *ctx, int for_crash_report);

/* ---- SetCommandInfo (Redis 7.0+): COMMAND INFO / COMMAND DOCS, key specs ---- */

typedef enum {
    REDISMODULE_ARG_TYPE_STRING,
    REDISMODULE_ARG_TYPE_INTEGER,
    REDISMODULE_ARG_TYPE_DOUBLE,
    REDISMODULE_ARG_TYPE_KEY,
    REDISMODULE_ARG_TYPE_PATTERN,
    REDISMODULE_ARG_TYPE_UNIX_TIME,
    REDISMODULE_ARG_TYPE_PURE_TOKEN,
    REDISMODULE_ARG_TYPE_ONEOF,
    REDISMODULE_ARG_TYPE_BLOCK
} RedisModuleCommandArgType;

#define REDISMODULE_CMD_ARG_NONE 0
#define REDISMODULE_CMD_ARG_OPTIONAL (1 << 0)
#define REDISMODULE_CMD_ARG_MULTIPLE (1 << 1)

typedef enum {
    REDISMODULE_KSPEC_BS_INVALID = 0,
    REDISMODULE_KSPEC_BS_UNKNOWN,
    REDISMODULE_KSPEC_BS_INDEX,
    REDISMODULE_KSPEC_BS_KEYWORD
} RedisModuleKeySpecBeginSearchType;

typedef enum {
    REDISMODULE_KSPEC_FK_OMITTED = 0,
    REDISMODULE_KSPEC_FK_UNKNOWN,
    REDISMODULE_KSPEC_FK_RANGE,
    REDISMODULE_KSPEC_FK_KEYNUM
} RedisModuleKeySpecFindKeysType;

#define REDISMODULE_CMD_KEY_RO (1ULL << 0)
#define REDISMODULE_CMD_KEY_RW (1ULL << 1)
#define REDISMODULE_CMD_KEY_ACCESS (1ULL << 4)
#define REDISMODULE_CMD_KEY_UPDATE (1ULL << 5)
#define REDISMODULE_CMD_KEY_INCOMPLETE (1ULL << 9)

typedef struct RedisModuleCommandArg {
    const char *name;
    RedisModuleCommandArgType type;
    int key_spec_index;
    const char *token;
    const char *summary;
    const char *since;
    int flags;
    const char *deprecated_since;
    struct RedisModuleCommandArg *subargs;
    const char *display_text;
} RedisModuleCommandArg;

typedef struct {
    const char *since;
    const char *changes;
} RedisModuleCommandHistoryEntry;

typedef struct {
    const char *notes;
    uint64_t flags;
    RedisModuleKeySpecBeginSearchType begin_search_type;
    union {
        struct {
            int pos;
        } index;
        struct {
            const char *keyword;
            int startfrom;
        } keyword;
    } bs;
    RedisModuleKeySpecFindKeysType find_keys_type;
    union {
        struct {
            int lastkey;
            int keystep;
            int limit;
        } range;
        struct {
            int keynumidx;
            int firstkey;
            int keystep;
        } keynum;
    } fk;
} RedisModuleCommandKeySpec;

typedef struct {
    int version;
    size_t sizeof_historyentry;
    size_t sizeof_keyspec;
    size_t sizeof_arg;
} RedisModuleCommandInfoVersion;

typedef struct {
    const RedisModuleCommandInfoVersion *version;
    const char *summary;
    const char *complexity;
    const char *since;
    RedisModuleCommandHistoryEntry *history;
    const char *tips;
    int arity;
    RedisModuleCommandKeySpec *key_specs;
    RedisModuleCommandArg *args;
} RedisModuleCommandInfo;

/*
 * The functions, as X(required, return type, name, parameters). A required
 * function missing from the server fails the load; an optional one is NULL.
 */
#define RL_API_FUNCS(X)                                                                                \
    X(1, void, SetModuleAttribs, (RedisModuleCtx * ctx, const char *name, int ver, int apiver))        \
    X(0, int, IsModuleNameBusy, (const char *name))                                                    \
    X(1, void, Log, (RedisModuleCtx * ctx, const char *level, const char *fmt, ...))                   \
    X(1, int, CreateCommand,                                                                           \
      (RedisModuleCtx * ctx, const char *name, RedisModuleCmdFunc f, const char *flags, int firstkey,  \
       int lastkey, int keystep))                                                                      \
    X(0, RedisModuleCommand *, GetCommand, (RedisModuleCtx * ctx, const char *name))                   \
    X(0, int, SetCommandInfo, (RedisModuleCommand * cmd, const RedisModuleCommandInfo *info))          \
    X(0, int, IsKeysPositionRequest, (RedisModuleCtx * ctx))                                           \
    X(0, void, KeyAtPos, (RedisModuleCtx * ctx, int pos))                                              \
    X(0, void, KeyAtPosWithFlags, (RedisModuleCtx * ctx, int pos, int flags))                          \
    X(0, int, AddACLCategory, (RedisModuleCtx * ctx, const char *name))                                \
    X(0, int, SetCommandACLCategories, (RedisModuleCommand * cmd, const char *categories))             \
    X(1, void, SetModuleOptions, (RedisModuleCtx * ctx, int options))                                  \
    X(1, int, RegisterInfoFunc, (RedisModuleCtx * ctx, RedisModuleInfoFunc cb))                        \
    X(1, int, InfoAddSection, (RedisModuleInfoCtx * ctx, const char *name))                            \
    X(1, int, InfoBeginDictField, (RedisModuleInfoCtx * ctx, const char *name))                        \
    X(1, int, InfoEndDictField, (RedisModuleInfoCtx * ctx))                                            \
    X(1, int, InfoAddFieldCString, (RedisModuleInfoCtx * ctx, const char *field, const char *value))   \
    X(1, int, InfoAddFieldLongLong, (RedisModuleInfoCtx * ctx, const char *field, long long value))    \
    X(1, int, InfoAddFieldULongLong,                                                                   \
      (RedisModuleInfoCtx * ctx, const char *field, unsigned long long value))                         \
    X(0, int, GetServerVersion, (void))                                                                \
    X(1, const char *, StringPtrLen, (const RedisModuleString *str, size_t *len))                      \
    X(1, RedisModuleString *, CreateString, (RedisModuleCtx * ctx, const char *ptr, size_t len))       \
    X(1, void, FreeString, (RedisModuleCtx * ctx, RedisModuleString * str))                            \
    X(1, RedisModuleKey *, OpenKey, (RedisModuleCtx * ctx, RedisModuleString * name, int mode))        \
    X(1, void, CloseKey, (RedisModuleKey * key))                                                       \
    X(1, int, KeyType, (RedisModuleKey * key))                                                         \
    X(1, char *, StringDMA, (RedisModuleKey * key, size_t *len, int mode))                             \
    X(1, int, StringTruncate, (RedisModuleKey * key, size_t newlen))                                   \
    X(1, int, DeleteKey, (RedisModuleKey * key))                                                       \
    X(1, int, SetAbsExpire, (RedisModuleKey * key, mstime_t expire))                                   \
    X(1, mstime_t, GetAbsExpire, (RedisModuleKey * key))                                               \
    X(1, size_t, ValueLength, (RedisModuleKey * key))                                                  \
    X(1, int, HashGet, (RedisModuleKey * key, int flags, ...))                                         \
    X(1, int, ZsetAdd, (RedisModuleKey * key, double score, RedisModuleString * ele, int *flags))      \
    X(1, int, ZsetRem, (RedisModuleKey * key, RedisModuleString * ele, int *deleted))                  \
    X(1, int, ZsetScore, (RedisModuleKey * key, RedisModuleString * ele, double *score))               \
    X(1, int, ZsetFirstInScoreRange, (RedisModuleKey * key, double min, double max, int minex, int maxex)) \
    X(1, int, ZsetLastInScoreRange, (RedisModuleKey * key, double min, double max, int minex, int maxex))  \
    X(1, RedisModuleString *, ZsetRangeCurrentElement, (RedisModuleKey * key, double *score))           \
    X(1, int, ZsetRangeNext, (RedisModuleKey * key))                                                   \
    X(1, int, ZsetRangePrev, (RedisModuleKey * key))                                                   \
    X(1, void, ZsetRangeStop, (RedisModuleKey * key))                                                  \
    X(1, int, ZsetRangeEndReached, (RedisModuleKey * key))                                             \
    X(1, int, SignalModifiedKey, (RedisModuleCtx * ctx, RedisModuleString * name))                     \
    X(1, int, NotifyKeyspaceEvent, (RedisModuleCtx * ctx, int type, const char *event, RedisModuleString *key)) \
    X(0, float, GetUsedMemoryRatio, (void))                                                            \
    X(0, RedisModuleServerInfoData *, GetServerInfo, (RedisModuleCtx * ctx, const char *section))      \
    X(0, unsigned long long, ServerInfoGetFieldUnsigned,                                               \
      (RedisModuleServerInfoData * data, const char *field, int *out_err))                             \
    X(0, void, FreeServerInfo, (RedisModuleCtx * ctx, RedisModuleServerInfoData * data))               \
    X(1, int, Replicate, (RedisModuleCtx * ctx, const char *cmd, const char *fmt, ...))                \
    X(1, RedisModuleCallReply *, Call, (RedisModuleCtx * ctx, const char *cmd, const char *fmt, ...))  \
    X(1, int, CallReplyType, (RedisModuleCallReply * reply))                                           \
    X(1, long long, CallReplyInteger, (RedisModuleCallReply * reply))                                  \
    X(1, void, FreeCallReply, (RedisModuleCallReply * reply))                                          \
    X(1, int, ReplyWithArray, (RedisModuleCtx * ctx, long len))                                        \
    X(1, int, ReplyWithLongLong, (RedisModuleCtx * ctx, long long ll))                                 \
    X(1, int, ReplyWithError, (RedisModuleCtx * ctx, const char *err))                                 \
    X(1, int, WrongArity, (RedisModuleCtx * ctx))                                                      \
    X(0, ustime_t, CachedMicroseconds, (void))                                                         \
    X(1, mstime_t, Milliseconds, (void))

/*
 * Every C file of a module that talks to the server includes this header
 * and sees a pointer per function, RM_<name>, and rl_now_ns. The one file
 * that defines RL_API_DEFINE before including it owns the pointers and
 * gets rl_load_api, which fills them in from RedisModule_OnLoad's context
 * and returns the name of a missing required function (NULL when none is
 * missing). The pointers are hidden: the library's own code reaches them
 * directly, not through its symbol table.
 */
#define RL_HIDDEN __attribute__((visibility("hidden")))
#ifdef RL_API_DEFINE
#define RL_DECLARE(req, ret, name, params) RL_HIDDEN ret(*RM_##name) params;
#else
#define RL_DECLARE(req, ret, name, params) extern RL_HIDDEN ret(*RM_##name) params;
#endif
RL_API_FUNCS(RL_DECLARE)
#undef RL_DECLARE

#ifdef RL_API_DEFINE
typedef int (*rl_getapi_fn)(const char *name, void *out);

static const char *rl_load_api(RedisModuleCtx *ctx) {
    rl_getapi_fn getapi = (rl_getapi_fn)((void **)ctx)[0];
#define RL_LOOKUP(req, ret, name, params)                                      \
    if (getapi("RedisModule_" #name, (void *)&RM_##name) != REDISMODULE_OK) \
        RM_##name = NULL;                                                      \
    if ((req) && RM_##name == NULL) return #name;
    RL_API_FUNCS(RL_LOOKUP)
#undef RL_LOOKUP
    return NULL;
}
#endif

/* The one clock read per command, in Unix nanoseconds: the server's cached
 * command time where it has one (Redis 7.2+, Valkey 8: one instant for a
 * whole MULTI/EXEC or script), else its wall clock in milliseconds. */
static inline long long rl_now_ns(void) {
    if (RM_CachedMicroseconds) return (long long)RM_CachedMicroseconds() * 1000LL;
    return (long long)RM_Milliseconds() * 1000000LL;
}

#endif
