/*
 * shim.h: the boundary between the C side (call.c, zset.c, load.c, which
 * alone talk to the server) and the Go side (which parses, computes and
 * decides).
 *
 * A command crosses C->Go once (rlExecute). Before it, C has opened every
 * key the command names, read each one's state and the clock; Go parses,
 * computes and leaves what to write and reply in the same struct; C then
 * writes, replicates and replies. Only the sorted sets call back into C:
 * the sliding log and the concurrency limiter to count and find entries, a
 * log write to ask how much memory is left.
 */
#ifndef RL_SHIM_H
#define RL_SHIM_H

#include <stddef.h>

/* Commands, as Go dispatches them. */
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
    RL_OP_RL_ALL,
    RL_OP_RL_PEEK,
    RL_OP_CONC_ACQUIRE,
    RL_OP_CONC_RELEASE,
    RL_OP_CONC_PEEK,
    RL_OP_COUNT
};

/* A sorted-set member longer than this can't be a sliding log's. */
#define RL_MEMBER_MAX 64

/* The most arguments a command takes, command name included: RL.ALL with
 * 16 keys of 5-word limiters, MS and RESERVE n is 103. */
#define RL_MAX_ARGS 128

/* The most keys one command names (RL.ALL's numkeys). */
#define RL_MAX_KEYS 16

/* The longest reply: RL.ALL ... EACH, six integers and five per limit. */
#define RL_MAX_REPLY (6 + 5 * RL_MAX_KEYS)

/* What a key holds, as C reads it. */
enum rl_keykind {
    RL_KEY_EMPTY,
    RL_KEY_STRING,
    RL_KEY_ZSET,
    RL_KEY_OTHER
};

/* What C does once Go returns. */
enum rl_action {
    RL_ACT_ERROR,     /* reply err (the default: a call Go never finished is an error) */
    RL_ACT_REPLY,     /* carry out each key's write, then reply the integers */
    RL_ACT_WRONGTYPE, /* reply the standard WRONGTYPE error */
    RL_ACT_ARITY      /* reply the standard wrong-number-of-arguments error */
};

/* What C writes to one key, for RL_ACT_REPLY. */
enum rl_write {
    RL_WRITE_NONE,
    RL_WRITE_SET, /* SET key value PXAT expire_ms */
    RL_WRITE_DEL, /* DEL key */
    RL_WRITE_ZLOG, /* sliding log: trim, move, add entries, expire */
    RL_WRITE_CONC  /* concurrency: sweep lapsed holders, add or remove one, expire */
};

/* The most lapsed holders one concurrency write removes, and the most a
 * count steps over before it asks ZCOUNT. */
#define RL_CONC_SWEEP 64

typedef struct {
    const char *ptr;
    size_t len;
} rl_arg;

/* One key of a command. */
typedef struct rl_key {
    /* Set by C before rlExecute. */
    int kind;               /* enum rl_keykind */
    const char *val;        /* the string value, valid until C closes the key */
    size_t val_len;
    long long expire_at_ms; /* the key's absolute expiry, or -1 for none */
    /* A sorted set: its size, and its oldest and newest entries, each a
     * score and a member (copied up to RL_MEMBER_MAX - 1 bytes; the length
     * is the member's whole length). */
    long long z_len;
    double z_oldest, z_newest;
    size_t z_oldest_len, z_newest_len;
    char z_oldest_member[RL_MEMBER_MAX], z_newest_member[RL_MEMBER_MAX];

    /* Set by Go. */
    int write;           /* enum rl_write */
    long long expire_ms; /* absolute Unix milliseconds */
    size_t set_len;
    char set_val[64];
    long long z_cutoff_us; /* RL_WRITE_ZLOG: remove entries scored at or below */
    long long z_add;       /* RL_WRITE_ZLOG: entries to add, scored z_score_us */
    long long z_score_us;
    int z_redate; /* RL_WRITE_ZLOG: move the entries scored after z_score_us to it */
    /* RL_WRITE_CONC: remove up to RL_CONC_SWEEP holders scored at or below
     * z_cutoff_us (never the caller), then add the caller (argument
     * conc_id_arg) scored z_score_us, or remove it; expire at expire_ms. */
    int conc_id_arg;
    int conc_add, conc_remove;

    /* Private to C. */
    void *ctx;
    void *name;
    void *key;
    void *id;             /* the holder id rl_conc_holder made, for the write; freed with the key */
    long long conc_swept, conc_swept_at; /* rl_conc_count's find at or below its bound (-1: not counted) */
} rl_key;

typedef struct rl_call {
    /* Set by C before rlExecute. */
    int op;
    int argc;
    rl_arg argv[RL_MAX_ARGS];
    long long now_ns; /* one clock read per command, Unix nanoseconds */
    int nkeys;        /* the keys C opened: 0 when numkeys does not parse */
    rl_key keys[RL_MAX_KEYS];

    /* Set by Go. */
    int action; /* enum rl_action */
    int reply_len;
    long long reply[RL_MAX_REPLY];
    char err[512]; /* NUL-terminated, starts with ERR (or OOM, WRONGTYPE); holds the longest error whole (TestErrorsFit) */

    /* Private to C. */
    void *ctx;
} rl_call;

/* Sliding log, on a sorted set of entries scored in Unix microseconds:
 * rl_zlog_count returns how many entries are scored above after_us;
 * rl_zlog_nth returns the score of the k-th oldest entry above after_us, or
 * -INFINITY. Both only read. */
long long rl_zlog_count(rl_key *k, long long after_us);
double rl_zlog_nth(rl_key *k, long long after_us, long long k_th);

/* Concurrency limiter, on a sorted set of holder ids scored with their
 * lease's end in Unix microseconds: rl_conc_count returns how many are
 * scored above after_us, stepping over at most RL_CONC_SWEEP lapsed ones
 * and asking ZCOUNT (O(log N)) beyond; rl_conc_holder returns the score of
 * member id and the highest score of any other member (-INFINITY when
 * absent, or none). Both only read. */
typedef struct {
    double own, latest;
} rl_holder;
long long rl_conc_count(rl_key *k, long long after_us);
rl_holder rl_conc_holder(rl_key *k, const char *id, size_t len);

/* The bytes the server may still allocate before it passes maxmemory, as
 * its own deny-oom check counts them, or -1 when it has no maxmemory. */
long long rl_memory_room(rl_call *c);

#endif
