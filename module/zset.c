/*
 * zset.c: the sorted-set store the sliding log and the concurrency limiter
 * share: reading (counts, the k-th entry, a holder's lease) for Go through
 * shim.h, and the writes call.c carries out, replicated as the commands
 * they are equivalent to.
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "module.h"

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

/* ---- An id's slots: slot 1 is the member id, slot k >= 2 the member
 * rl_slot_member makes (engine.SlotMember), all scored with its lease ---- */

#define RL_SLOT_MAX (RL_MAX_ID + 1 + 21)

/* Writes id's k-th slot's member (k >= 2) into buf (RL_SLOT_MAX bytes): id,
 * NUL bytes up to RL_MAX_ID, one byte of id's length, k in decimal; longer
 * than any id, so never one. Returns its length. */
static size_t rl_slot_member(char *buf, const char *id, size_t len, long long k) {
    memset(buf, 0, RL_MAX_ID);
    memcpy(buf, id, len);
    buf[RL_MAX_ID] = (char)len;
    return RL_MAX_ID + 1 + (size_t)snprintf(buf + RL_MAX_ID + 1, 21, "%lld", k);
}

/* id's k-th slot as a string: idstr itself for the first (not to be freed). */
static RedisModuleString *rl_slot(RedisModuleCtx *ctx, RedisModuleString *idstr, const char *id, size_t len,
                                  long long k) {
    if (k <= 1) return idstr;
    char buf[RL_SLOT_MAX];
    return RM_CreateString(ctx, buf, rl_slot_member(buf, id, len, k));
}

/* Whether id's k-th slot is a member scored own. */
static int rl_slot_is(rl_key *k, const char *id, size_t len, long long slot, double own) {
    RedisModuleCtx *ctx = (RedisModuleCtx *)k->ctx;
    RedisModuleString *m = rl_slot(ctx, NULL, id, len, slot);
    double score = -INFINITY;
    int is = RM_ZsetScore((RedisModuleKey *)k->key, m, &score) == REDISMODULE_OK && score == own;
    RM_FreeString(ctx, m);
    return is;
}

/* Counts id's slots scored own, probing 2, 4, 8 ... up to the set's size
 * and then halving (engine.SlotsHeld), and, when it holds several, finds
 * the latest lease not one of them (fakeredis's Holder). */
static rl_holder rl_conc_slots(rl_key *k, const char *id, size_t len, rl_holder h) {
    if (h.own == -INFINITY) return h;
    long long lo = 1, hi = 2; /* slot lo is held; hi may not be */
    while (hi <= k->z_len && rl_slot_is(k, id, len, hi, h.own)) lo = hi, hi *= 2;
    while (hi - lo > 1) {
        long long mid = lo + (hi - lo) / 2;
        if (rl_slot_is(k, id, len, mid, h.own)) lo = mid;
        else hi = mid;
    }
    h.slots = lo;
    if (lo < 2 || h.latest > h.own) return h;
    /* The newest member is one of id's slots: the latest other is another
     * member scored own, else the highest below it. */
    RedisModuleCtx *ctx = (RedisModuleCtx *)k->ctx;
    RedisModuleKey *key = (RedisModuleKey *)k->key;
    char own[32];
    snprintf(own, sizeof own, "%.17g", h.own);
    RedisModuleCallReply *r = RM_Call(ctx, "ZCOUNT", "scc", (RedisModuleString *)k->name, own, own);
    long long at_own = r != NULL && RM_CallReplyType(r) == REDISMODULE_REPLY_INTEGER ? RM_CallReplyInteger(r) : 0;
    if (r != NULL) RM_FreeCallReply(r);
    if (at_own > lo) return h; /* h.latest is own: the newest's score */
    h.latest = -INFINITY;
    if (RM_ZsetLastInScoreRange(key, -INFINITY, h.own, 0, 1) == REDISMODULE_OK) {
        if (!RM_ZsetRangeEndReached(key)) RM_FreeString(ctx, RM_ZsetRangeCurrentElement(key, &h.latest));
        RM_ZsetRangeStop(key);
    }
    return h;
}

rl_holder rl_conc_holder(rl_key *k, const char *id, size_t len) {
    RedisModuleKey *key = (RedisModuleKey *)k->key;
    RedisModuleCtx *ctx = (RedisModuleCtx *)k->ctx;
    rl_holder h = {-INFINITY, -INFINITY, 0};
    if (k->kind != RL_KEY_ZSET) return h;
    if (k->id == NULL) k->id = RM_CreateString(ctx, id, len); /* kept for the write */
    /* Is id the newest member, read with the key? Its copy is cut at
     * RL_MEMBER_MAX - 1 bytes: a longer id that matches it is looked up. */
    int newest = k->z_newest_len == len && len < RL_MEMBER_MAX && memcmp(k->z_newest_member, id, len) == 0;
    if (!newest) {
        /* The common case: id is elsewhere or absent, the newest is another's
         * (or, for an id holding several slots, one of its own). */
        if (RM_ZsetScore(key, (RedisModuleString *)k->id, &h.own) != REDISMODULE_OK) h.own = -INFINITY;
        size_t cut = len < RL_MEMBER_MAX - 1 ? len : RL_MEMBER_MAX - 1;
        if (k->z_newest_len != len || memcmp(k->z_newest_member, id, cut) != 0) {
            h.latest = k->z_newest;
            return rl_conc_slots(k, id, len, h);
        }
    }
    /* id is the newest (a release soon after its acquire, a renewal): its
     * score is the newest's, found without a lookup (a compact set's lookup
     * scans every entry), and the latest other is the one before it. It
     * holds one slot: a second, scored alike, would sort after it. */
    if (RM_ZsetLastInScoreRange(key, -INFINITY, INFINITY, 0, 0) != REDISMODULE_OK) return h;
    int there = !RM_ZsetRangeEndReached(key);
    double score = -INFINITY;
    if (there && rl_member_is(ctx, RM_ZsetRangeCurrentElement(key, &score), id, len)) {
        h.own = score;
        h.slots = 1;
        there = RM_ZsetRangePrev(key);
        if (there) RM_FreeString(ctx, RM_ZsetRangeCurrentElement(key, &score));
    } else if (newest && RM_ZsetScore(key, (RedisModuleString *)k->id, &h.own) != REDISMODULE_OK) {
        h.own = -INFINITY; /* never: the newest was id when the key was read */
    }
    if (there) h.latest = score;
    RM_ZsetRangeStop(key);
    return h.slots == 0 ? rl_conc_slots(k, id, len, h) : h;
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

/* Removes the newest n entries of a sliding log (a return), replicated as
 * ZREMRANGEBYRANK key -n -1, which removes the same ones on a replica (its
 * set is the same), with that command's events. */
static void rl_zlog_pop(RedisModuleCtx *ctx, rl_key *k, long long n) {
    RedisModuleKey *key = (RedisModuleKey *)k->key;
    RedisModuleString *name = (RedisModuleString *)k->name;
    RedisModuleString *batch[RL_ZBATCH];
    long long removed = 0;
    while (removed < n) {
        int got = 0;
        if (RM_KeyType(key) == REDISMODULE_KEYTYPE_ZSET &&
            RM_ZsetLastInScoreRange(key, -INFINITY, INFINITY, 0, 0) == REDISMODULE_OK) {
            while (!RM_ZsetRangeEndReached(key) && got < RL_ZBATCH && removed + got < n) {
                batch[got++] = RM_ZsetRangeCurrentElement(key, NULL);
                if (!RM_ZsetRangePrev(key)) break;
            }
            RM_ZsetRangeStop(key);
        }
        for (int i = 0; i < got; i++) {
            RM_ZsetRem(key, batch[i], NULL);
            RM_FreeString(ctx, batch[i]);
        }
        removed += got;
        if (got == 0) break;
    }
    if (removed == 0) return;
    char from[24];
    snprintf(from, sizeof from, "%lld", -removed);
    RM_Replicate(ctx, "ZREMRANGEBYRANK", "scc", name, from, "-1");
    RM_NotifyKeyspaceEvent(ctx, REDISMODULE_NOTIFY_ZSET, "zremrangebyrank", name);
    if (RM_KeyType(key) == REDISMODULE_KEYTYPE_EMPTY)
        RM_NotifyKeyspaceEvent(ctx, REDISMODULE_NOTIFY_GENERIC, "del", name);
}

/* A sliding-log write: remove the entries that left the window, move the
 * ones dated after now to now (z_redate: a clock stepped back), add z_add
 * entries scored z_score_us (members "<score>-<n>", unique), remove the
 * newest z_remove (a return), expire the key when its newest entry leaves
 * (unless it is gone), and replicate exactly that, with the events the
 * replicated commands emit on a replica. */
void rl_zlog_write(RedisModuleCtx *ctx, rl_key *k) {
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
    if (k->z_remove > 0) rl_zlog_pop(ctx, k, k->z_remove);
    if (RM_KeyType(key) == REDISMODULE_KEYTYPE_ZSET) {
        RM_SetAbsExpire(key, k->expire_ms);
        RM_Replicate(ctx, "PEXPIREAT", "sl", name, k->expire_ms);
        RM_NotifyKeyspaceEvent(ctx, REDISMODULE_NOTIFY_GENERIC, "expire", name);
    }
    RM_SignalModifiedKey(ctx, name);
}

/* A concurrency write: remove up to RL_CONC_SWEEP lapsed holders (scored
 * at or below z_cutoff_us; the caller's first slot is left to the next
 * step), then set the caller's slots 1 to conc_to scored z_score_us, or
 * remove its slots conc_from to conc_to, then expire the key at expire_ms,
 * its latest lease. Replicated as ZREM, ZADD and PEXPIREAT (in batches of
 * RL_ZBATCH members beyond the sweep), with the events they emit on a
 * replica. */
void rl_conc_write(RedisModuleCtx *ctx, rl_call *c, rl_key *k) {
    RedisModuleKey *key = (RedisModuleKey *)k->key;
    RedisModuleString *name = (RedisModuleString *)k->name;
    const rl_arg *id = &c->argv[k->conc_id_arg];
    RedisModuleString *idstr = k->id ? (RedisModuleString *)k->id : RM_CreateString(ctx, id->ptr, id->len);
    k->id = idstr; /* freed with the key */
    long long expires = k->expire_at_ms;
    RedisModuleString *batch[RL_CONC_SWEEP + 2 * RL_ZBATCH];
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
            else batch[n++] = m;
            if (!RM_ZsetRangeNext(key)) break;
        }
        RM_ZsetRangeStop(key);
    }
    long long slot = k->conc_remove ? k->conc_from : 1, last = k->conc_remove ? k->conc_to : 0;
    do {
        while (slot <= last && n < RL_CONC_SWEEP + RL_ZBATCH) batch[n++] = rl_slot(ctx, idstr, id->ptr, id->len, slot++);
        for (int i = 0; i < n; i++) RM_ZsetRem(key, batch[i], NULL);
        if (n > 0) {
            RM_Replicate(ctx, "ZREM", "sv", name, batch, (size_t)n);
            RM_NotifyKeyspaceEvent(ctx, REDISMODULE_NOTIFY_ZSET, "zrem", name);
            if (RM_KeyType(key) == REDISMODULE_KEYTYPE_EMPTY) { /* the API deletes an emptied set */
                RM_NotifyKeyspaceEvent(ctx, REDISMODULE_NOTIFY_GENERIC, "del", name);
                expires = REDISMODULE_NO_EXPIRE;
                slot = last + 1;
            }
        }
        for (int i = 0; i < n; i++)
            if (batch[i] != idstr) RM_FreeString(ctx, batch[i]);
        n = 0;
    } while (slot <= last);
    if (k->conc_add) {
        char score[24];
        int slen = snprintf(score, sizeof score, "%lld", k->z_score_us);
        for (slot = 1; slot <= k->conc_to;) {
            int flags = 0;
            RedisModuleString *m = rl_slot(ctx, idstr, id->ptr, id->len, slot++);
            RM_ZsetAdd(key, (double)k->z_score_us, m, &flags);
            batch[n++] = RM_CreateString(ctx, score, (size_t)slen);
            batch[n++] = m;
            if (n == 2 * RL_ZBATCH || slot > k->conc_to) {
                RM_Replicate(ctx, "ZADD", "sv", name, batch, (size_t)n);
                RM_NotifyKeyspaceEvent(ctx, REDISMODULE_NOTIFY_ZSET, "zadd", name);
                for (int i = 0; i < n; i++)
                    if (batch[i] != idstr) RM_FreeString(ctx, batch[i]);
                n = 0;
            }
        }
    }
    if (RM_KeyType(key) == REDISMODULE_KEYTYPE_ZSET && expires != k->expire_ms) {
        RM_SetAbsExpire(key, k->expire_ms);
        RM_Replicate(ctx, "PEXPIREAT", "sl", name, k->expire_ms);
        RM_NotifyKeyspaceEvent(ctx, REDISMODULE_NOTIFY_GENERIC, "expire", name);
    }
    RM_SignalModifiedKey(ctx, name);
}
