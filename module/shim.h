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
 * log write to ask how much memory is left, and LIMITS to read its hash.
 */
#ifndef RL_SHIM_H
#define RL_SHIM_H

#include <stddef.h>

/* The numbers and sizes Go defines: RL_MAX_ARGS, RL_MAX_KEYS, RL_MAX_REPLY,
 * RL_MEMBER_MAX, RL_CONC_SWEEP, RL_ERR_CAPACITY, RL_SET_MAX, and the enums
 * rl_keykind (what a key holds, as C reads it), rl_action (what C does once
 * Go returns) and rl_write (what C writes to one key). */
#include "protocol_gen.h"

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
    char set_val[RL_SET_MAX];
    long long z_cutoff_us; /* RL_WRITE_ZLOG: remove entries scored at or below */
    long long z_add;       /* RL_WRITE_ZLOG: entries to add, scored z_score_us */
    long long z_score_us;
    int z_redate; /* RL_WRITE_ZLOG: move the entries scored after z_score_us to it */
    long long z_remove; /* RL_WRITE_ZLOG: then remove the newest z_remove entries (a return) */
    /* RL_WRITE_CONC: remove up to RL_CONC_SWEEP holders scored at or below
     * z_cutoff_us (never the caller's first slot), then set the caller's
     * slots 1 to conc_to (argument conc_id_arg; rl_slot_member names them)
     * scored z_score_us, or remove its slots conc_from to conc_to; expire
     * at expire_ms. */
    int conc_id_arg;
    int conc_add, conc_remove;
    long long conc_from, conc_to;

    /* Private to C. */
    void *ctx;
    void *name;
    void *key;
    void *id;             /* the holder id rl_conc_holder made, for the write; freed with the key */
    long long conc_swept, conc_swept_at; /* rl_conc_count's find at or below its bound (-1: not counted) */
} rl_key;

/* One LIMITS key field of a command: the hash's field, as C read it. */
typedef struct {
    int kind;        /* enum rl_limits_kind */
    const char *val; /* RL_LIMITS_FOUND: the field's value, valid until C frees str */
    size_t len;
    void *str; /* private to C: the value's string */
} rl_limits;

typedef struct rl_call {
    /* Set by C before rlExecute. */
    int cmd; /* the command's row of rl_commands (commands_gen.c) */
    int argc;
    rl_arg argv[RL_MAX_ARGS];
    long long now_ns; /* one clock read per command, Unix nanoseconds */
    int nkeys;        /* the keys C opened: 0 when numkeys does not parse */
    rl_key keys[RL_MAX_KEYS];

    /* Set by Go. */
    int action; /* enum rl_action */
    int reply_len;
    long long reply[RL_MAX_REPLY];
    char err[RL_ERR_CAPACITY]; /* NUL-terminated, starts with ERR (or OOM, WRONGTYPE); holds the longest error whole (TestErrorsFit) */

    /* Private to C. */
    void *ctx;
    void *rargv;   /* the arguments as the server passed them */
    int nlimits;   /* the LIMITS fields read (rl_limits_field), freed after the call */
    rl_limits limits[RL_MAX_KEYS];
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
 * member id, how many slots id holds at that score (engine.SlotsHeld; 0
 * when id is absent) and the highest score of any member not one of them
 * (-INFINITY when absent, or none). Both only read. */
typedef struct {
    double own, latest;
    long long slots;
} rl_holder;
long long rl_conc_count(rl_key *k, long long after_us);
rl_holder rl_conc_holder(rl_key *k, const char *id, size_t len);

/* LIMITS key field, when Go's parser meets it: rl_limits_field reads the
 * field argument arg + 1 names of the hash at argument arg, read only, in
 * the same atomic step as the rest of the command (NULL past RL_MAX_KEYS
 * reads in one call). Only calls with LIMITS pay for it. */
const rl_limits *rl_limits_field(rl_call *c, int arg);

/* The bytes the server may still allocate before it passes maxmemory, as
 * its own deny-oom check counts them, or -1 when it has no maxmemory. */
long long rl_memory_room(rl_call *c);

#endif
