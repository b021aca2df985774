package main

import (
	"bufio"
	"context"
	"fmt"
	"log"
	"math/rand/v2"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// concRow is one concurrency-limiter workload, run with the module and with
// the Lua recipe (bench/lua/conc_*.lua) in the same rounds.
type concRow struct {
	name, what string
	mod, lua   concRun
}

// concRun is one side's figures, one per round: calls (or pairs) per
// second, and the server's µs per call (or pair).
type concRun struct{ ops, us []float64 }

func (r concRun) medians() (ops, us float64) {
	w := workload{}
	return w.median(r.ops), w.median(r.us)
}

// concLapsed is how many lapsed holders the sweep workload starts from.
const concLapsed = 100000

// measureConc runs the concurrency workloads on s, module and Lua
// alternating, rounds times.
func measureConc(ctx context.Context, s *server, rounds, n int) []*concRow {
	shas := map[string]string{}
	for _, f := range []string{"conc_acquire.lua", "conc_release.lua"} {
		src, err := scripts.ReadFile("lua/" + f)
		if err != nil {
			log.Fatal(err)
		}
		if shas[f], err = s.rdb.ScriptLoad(ctx, string(src)).Result(); err != nil {
			log.Fatalf("bench: %s: %v", f, err)
		}
	}
	acquire := func(lua bool, rest ...string) []string {
		if lua {
			return append([]string{"EVALSHA", shas["conc_acquire.lua"], "1"}, rest...)
		}
		return append([]string{"CONC.ACQUIRE"}, rest...)
	}
	stat := func(lua bool, cmds ...string) []string {
		if lua {
			return []string{"evalsha"}
		}
		return cmds
	}
	rows := []*concRow{
		{name: "CONC.ACQUIRE + CONC.RELEASE, a pair, 100 holders present", what: "pairs on one key that holds 100 other holders (limit 200, lease 60 s; a compact listpack, where finding an id scans every entry), 50 clients of 16 pairs per round trip; per pair"},
		{name: "CONC.ACQUIRE + CONC.RELEASE, a pair, 1,000 holders present", what: "the same with 1,000 holders (limit 2,000; a skiplist with a hash of the ids)"},
		{name: "CONC.ACQUIRE + CONC.RELEASE, a pair on a key of its own", what: "pairs on 100 keys, each acquire creating its key and each release deleting it (limit 100); per pair"},
		{name: "CONC.ACQUIRE, renewal, 100 holders", what: "one key holding 100 holders (limit 200), each call renewing one of them, `-P 16`"},
		{name: "CONC.ACQUIRE, refused, 100 holders", what: "one key full with 100 holders (limit 100), each call a new id, `-P 16`"},
		{name: "CONC.ACQUIRE on 100,000 lapsed holders", what: "one call on a key holding 100,000 lapsed holders and one live one; µs of that call"},
	}
	const hot = "b:conc"
	fill := func(lua bool, holders int) {
		s.rdb.FlushAll(ctx)
		for h := range holders {
			if err := s.rdb.Do(ctx, toAny(acquire(lua, hot, strconv.Itoa(2*holders), "600", fmt.Sprintf("h%012d", h)))...).Err(); err != nil {
				log.Fatalf("bench: filling %s: %v", hot, err)
			}
		}
		s.rdb.ConfigResetStat(ctx)
	}
	check := func(row *concRow, holders int64) {
		if got, _ := s.rdb.ZCard(ctx, hot).Result(); got != holders {
			log.Fatalf("bench: %s holds %d holders after %s, want %d", hot, got, row.name, holders)
		}
	}
	for r := range rounds {
		for i := range 2 {
			lua := (r+i)%2 == 1
			side := func(row *concRow) *concRun {
				if lua {
					return &row.lua
				}
				return &row.mod
			}
			pairs := n / 2
			for j, holders := range []int{100, 1000, 0} {
				onHot := holders > 0
				if onHot {
					fill(lua, holders)
				} else {
					s.rdb.FlushAll(ctx)
					s.rdb.ConfigResetStat(ctx)
				}
				ops := pairBenchmark(ctx, s.port, 16, pairs, func(key, id string) ([]any, []any) {
					limit := 100
					if onHot {
						key, limit = hot, 2*holders
					}
					if lua {
						return []any{"EVALSHA", shas["conc_acquire.lua"], 1, key, limit, 60, id}, []any{"EVALSHA", shas["conc_release.lua"], 1, key, id}
					}
					return []any{"CONC.ACQUIRE", key, limit, 60, id}, []any{"CONC.RELEASE", key, id}
				})
				run := side(rows[j])
				run.ops = append(run.ops, ops)
				run.us = append(run.us, usecTotal(ctx, s.rdb, stat(lua, "conc.acquire", "conc.release")...)/float64(pairs))
				if onHot {
					check(rows[j], int64(holders))
				}
			}

			for j, limit := range []int{200, 100} {
				fill(lua, 100)
				id := "h__rand_int__" // one of the 100 holders (-r 100)
				rnd := 100
				if j == 1 {
					id, rnd = "n__rand_int__", 100000 // new ids: refused
				}
				ops := benchmarkRange(s.port, 16, n, rnd, acquire(lua, hot, strconv.Itoa(limit), "600", id))
				run := side(rows[3+j])
				run.ops = append(run.ops, ops)
				run.us = append(run.us, usecPerCall(ctx, s.rdb, stat(lua, "conc.acquire")[0]))
				check(rows[3+j], 100)
			}

			s.rdb.FlushAll(ctx)
			fillLapsed(ctx, s.rdb, "b:lapsed", concLapsed)
			s.rdb.ConfigResetStat(ctx)
			if err := s.rdb.Do(ctx, toAny(acquire(lua, "b:lapsed", "10", "60", "new"))...).Err(); err != nil {
				log.Fatalf("bench: acquire on lapsed holders: %v", err)
			}
			run := side(rows[5])
			run.us = append(run.us, usecPerCall(ctx, s.rdb, stat(lua, "conc.acquire")[0]))
			log.Printf("%s round %d %s: pairs %.0f/s, %.0f/s and %.0f/s, renewal %.2f µs, refusal %.2f µs, lapsed %.0f µs",
				s.version, r+1, map[bool]string{false: "module", true: "Lua"}[lua], rows[0].side(lua).ops[r],
				rows[1].side(lua).ops[r], rows[2].side(lua).ops[r], rows[3].side(lua).us[r], rows[4].side(lua).us[r],
				rows[5].side(lua).us[r])
		}
	}
	return rows
}

func (row *concRow) side(lua bool) concRun {
	if lua {
		return row.lua
	}
	return row.mod
}

// fillLapsed makes key a concurrency state of n lapsed holders and one live
// one, as CONC.ACQUIRE leaves it (the key expiring with its latest lease,
// rounded up to the second).
func fillLapsed(ctx context.Context, rdb *redis.Client, key string, n int) {
	err := rdb.Eval(ctx, `
		local t = redis.call('TIME')
		local now = t[1] * 1000000 + t[2]
		for i = 1, tonumber(ARGV[1]) do redis.call('ZADD', KEYS[1], now - 1000000 - i, 'gone-' .. i) end
		local live = now + 600000000
		redis.call('ZADD', KEYS[1], live, 'live')
		redis.call('PEXPIREAT', KEYS[1], math.ceil(live / 1000000) * 1000)
		return 1`, []string{key}, n).Err()
	if err != nil {
		log.Fatalf("bench: filling %s: %v", key, err)
	}
}

// pairBenchmark sends n pairs, an acquire and the release of the same id,
// each on one of 100 keys (pair may name another), from 50 connections with pipeline pairs per round
// trip; it returns pairs per second. It writes the protocol itself and reads
// the replies with a minimal parser (checking every acquire admitted and
// every release freeing a slot), as redis-benchmark does for one command: a
// full client would spend more of this 2-core machine than the server.
func pairBenchmark(ctx context.Context, port, pipeline, n int, pair func(key, id string) ([]any, []any)) float64 {
	const clients = 50
	var sent atomic.Int64
	var wg sync.WaitGroup
	start := time.Now()
	for c := range clients {
		conn, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", port))
		if err != nil {
			log.Fatalf("bench: pairs: %v", err)
		}
		wg.Go(func() {
			defer conn.Close()
			rng := rand.New(rand.NewPCG(uint64(c), uint64(port)))
			rd := bufio.NewReaderSize(conn, 64<<10)
			var buf []byte
			seq := 0
			for sent.Add(int64(pipeline)) <= int64(n)+int64(pipeline)-1 {
				buf = buf[:0]
				for range pipeline {
					seq++
					acq, rel := pair("b:pair:"+strconv.Itoa(rng.IntN(100)), "c"+strconv.Itoa(c)+"-"+strconv.Itoa(seq))
					buf = appendCommand(appendCommand(buf, acq), rel)
				}
				if _, err := conn.Write(buf); err != nil {
					log.Fatalf("bench: pairs: %v", err)
				}
				for range pipeline {
					if a, r := readReply(rd), readReply(rd); len(a) != 5 || a[0] != 0 || len(r) != 1 || r[0] != 1 {
						log.Fatalf("bench: pair replied %v, %v", a, r)
					}
				}
			}
		})
	}
	wg.Wait()
	return float64(n) / time.Since(start).Seconds()
}

// appendCommand appends args as a RESP array of bulk strings.
func appendCommand(b []byte, args []any) []byte {
	b = append(b, '*')
	b = strconv.AppendInt(b, int64(len(args)), 10)
	b = append(b, "\r\n"...)
	for _, a := range args {
		s := fmt.Sprint(a)
		b = append(b, '$')
		b = strconv.AppendInt(b, int64(len(s)), 10)
		b = append(b, "\r\n"...)
		b = append(b, s...)
		b = append(b, "\r\n"...)
	}
	return b
}

// readReply reads an integer or an array of integers; anything else is
// fatal.
func readReply(rd *bufio.Reader) []int64 {
	line := func() string {
		l, err := rd.ReadString('\n')
		if err != nil || len(l) < 3 {
			log.Fatalf("bench: pairs: reply %q: %v", l, err)
		}
		return l[:len(l)-2]
	}
	integer := func(l string) int64 {
		v, err := strconv.ParseInt(l[1:], 10, 64)
		if l[0] != ':' || err != nil {
			log.Fatalf("bench: pairs: reply %q", l)
		}
		return v
	}
	l := line()
	if l[0] != '*' {
		return []int64{integer(l)}
	}
	n, err := strconv.Atoi(l[1:])
	if err != nil {
		log.Fatalf("bench: pairs: reply %q", l)
	}
	out := make([]int64, n)
	for i := range out {
		out[i] = integer(line())
	}
	return out
}

// usecTotal sums the server's µs over the commands named.
func usecTotal(ctx context.Context, rdb *redis.Client, stats ...string) float64 {
	total := 0.0
	for _, stat := range stats {
		total += commandStat(ctx, rdb, stat, "usec")
	}
	return total
}

func toAny(s []string) []any {
	out := make([]any, len(s))
	for i, v := range s {
		out[i] = v
	}
	return out
}
