/*
 * shim.h: the boundary between the C side (shim.c, which alone talks to the
 * server) and the Go side (which parses, computes and decides). One command
 * crosses C->Go once (rlExecute) and Go->C once (rl_read, after the arguments
 * parsed); everything else happens on the side it starts on.
 */
#ifndef RL_SHIM_H
#define RL_SHIM_H

#include <stddef.h>

/* Algorithms, as Go dispatches them. */
enum rl_op {
    RL_OP_GCRA_THROTTLE,
    RL_OP_GCRA_PEEK,
    RL_OP_TB_TAKE,
    RL_OP_TB_PEEK,
    RL_OP_LB_ENQUEUE,
    RL_OP_LB_PEEK,
    RL_OP_SW_HIT,
    RL_OP_SW_PEEK,
    RL_OP_FW_HIT,
    RL_OP_FW_PEEK,
    RL_OP_SL_HIT,
    RL_OP_SL_PEEK,
    RL_OP_COUNT
};

/* The most arguments a command takes, command name included. */
#define RL_MAX_ARGS 16

/* What the key holds, as rl_read reports it. */
enum rl_keykind {
    RL_KEY_EMPTY,
    RL_KEY_STRING,
    RL_KEY_ZSET,
    RL_KEY_OTHER
};

/* What C does once Go returns. */
enum rl_action {
    RL_ACT_ERROR,     /* reply err (the default: a call Go never finished is an error) */
    RL_ACT_REPLY,     /* reply the five integers, write nothing */
    RL_ACT_SET,       /* SET key value PXAT expire_ms, replicated, then reply */
    RL_ACT_DEL,       /* DEL key, replicated, then reply */
    RL_ACT_WRONGTYPE, /* reply the standard WRONGTYPE error */
    RL_ACT_ARITY,     /* reply the standard wrong-number-of-arguments error */
    RL_ACT_ZLOG       /* sliding log: trim, add entries, expire, replicated, then reply */
};

typedef struct {
    const char *ptr;
    size_t len;
} rl_arg;

typedef struct rl_call {
    /* Set by C before rlExecute. */
    int op;
    int readonly;
    int argc;
    rl_arg argv[RL_MAX_ARGS];

    /* Set by Go before rl_read. */
    int want_expire; /* also read the key's expiry */

    /* Set by rl_read. */
    long long now_ns; /* one clock read per command, Unix nanoseconds */
    int kind;         /* enum rl_keykind */
    const char *val;  /* the string value, valid until C closes the key */
    size_t val_len;
    long long expire_at_ms; /* absolute, or -1 for none (only with want_expire) */

    /* Set by rl_zlog_scan. */
    long long z_live;      /* entries with a score above the cutoff */
    long long z_newest_us; /* the highest score, or LLONG_MIN */

    /* Set by Go. */
    int action; /* enum rl_action */
    long long reply[5];
    long long expire_ms; /* absolute Unix milliseconds, for RL_ACT_SET */
    size_t set_len;
    char set_val[64];
    long long z_cutoff_us; /* RL_ACT_ZLOG: remove entries scored at or below */
    long long z_add;       /* RL_ACT_ZLOG: entries to add, scored z_score_us */
    long long z_score_us;
    char err[240]; /* NUL-terminated, starts with ERR */

    /* Private to C. */
    void *ctx;
    void *key_name;
    void *key;
} rl_call;

/* Opens the key (for writing too unless the command is read-only), reads
 * the clock, and fills now_ns, kind, val and val_len. Called by Go once the
 * arguments have parsed. */
void rl_read(rl_call *c);

/* Sliding log, on a sorted set of entries scored in Unix microseconds:
 * rl_zlog_scan counts the entries scored above after_us (z_live) and finds
 * the newest (z_newest_us); rl_zlog_nth returns the score of the k-th
 * oldest entry above after_us. Both only read. */
void rl_zlog_scan(rl_call *c, long long after_us);
long long rl_zlog_nth(rl_call *c, long long after_us, long long k);

#endif
