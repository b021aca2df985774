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

/* A sorted-set member longer than this can't be a sliding log's. */
#define RL_MEMBER_MAX 64

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

    /* Set by rl_read. */
    long long now_ns; /* one clock read per command, Unix nanoseconds */
    int kind;         /* enum rl_keykind */
    const char *val;  /* the string value, valid until C closes the key */
    size_t val_len;
    long long expire_at_ms; /* the key's absolute expiry, or -1 for none */
    /* A sorted set: its size, and its oldest and newest entries, each a
     * score and a member (copied up to RL_MEMBER_MAX - 1 bytes; the length
     * is the member's whole length). */
    long long z_len;
    double z_oldest, z_newest;
    size_t z_oldest_len, z_newest_len;
    char z_oldest_member[RL_MEMBER_MAX], z_newest_member[RL_MEMBER_MAX];

    /* Set by rl_zlog_scan. */
    long long z_live; /* entries with a score above the cutoff */

    /* Set by Go. */
    int action; /* enum rl_action */
    long long reply[5];
    long long expire_ms; /* absolute Unix milliseconds, for RL_ACT_SET */
    size_t set_len;
    char set_val[64];
    long long z_cutoff_us; /* RL_ACT_ZLOG: remove entries scored at or below */
    long long z_add;       /* RL_ACT_ZLOG: entries to add, scored z_score_us */
    long long z_score_us;
    int z_redate; /* RL_ACT_ZLOG: move the entries scored after z_score_us to it */
    char err[240]; /* NUL-terminated, starts with ERR (or OOM) */

    /* Private to C. */
    void *ctx;
    void *key_name;
    void *key;
} rl_call;

/* Opens the key (for writing too unless the command is read-only), reads
 * the clock, and fills now_ns, kind, val, val_len, expire_at_ms and, for a
 * sorted set, z_len and its oldest and newest entries. Called by Go once the
 * arguments have parsed. */
void rl_read(rl_call *c);

/* Sliding log, on a sorted set of entries scored in Unix microseconds:
 * rl_zlog_scan counts the entries scored above after_us (z_live);
 * rl_zlog_nth returns the score of the k-th oldest entry above after_us, or
 * -INFINITY. Both only read. */
void rl_zlog_scan(rl_call *c, long long after_us);
double rl_zlog_nth(rl_call *c, long long after_us, long long k);

/* The bytes the server may still allocate before it passes maxmemory, as
 * its own deny-oom check counts them, or -1 when it has no maxmemory. */
long long rl_memory_room(rl_call *c);

#endif
