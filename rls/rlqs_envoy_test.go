package rls

import (
	"context"
	"math"
	"sync"
	"time"

	rlqspb "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/durationpb"
)

// fakeEnvoy is a client of RLQS that behaves as Envoy's rate_limit_quota
// filter does (source/extensions/filters/http/rate_limit_quota/):
//
//   - the stream opens lazily, with the first bucket; every message names
//     the domain;
//   - a new bucket is decided by the no-assignment behaviour (allow all)
//     and reported at once, time_elapsed 0;
//   - every interval (Envoy's is a hard-coded 5 s) every bucket is
//     reported, idle ones too: its allowed and denied since its last
//     report, and time_elapsed in whole seconds (truncated);
//   - an action for a bucket id it does not hold is skipped; abandon_action
//     forgets the bucket; an assignment's TTL is read in whole seconds (0
//     expires it at once); requests_per_time_unit, or no strategy, is
//     skipped;
//   - a token bucket refills continuously at tokens_per_fill /
//     fill_interval (whole seconds) up to max_tokens; an assignment with
//     the same max_tokens, tokens_per_fill and fill_interval's nanos keeps
//     the bucket and its tokens, another builds a new one, full (empty when
//     the old one's share of the new max_tokens is under 1);
//   - past its TTL a bucket uses the fallback (a token bucket, or allow
//     all when none is set) until the next assignment;
//   - a stream that ends is reopened at the next report, whose usage is
//     dropped if that fails.
type fakeEnvoy struct {
	dial     func() (*grpc.ClientConn, error)
	domain   string
	interval time.Duration
	fallback *typev3.TokenBucket // expired_assignment_behavior's fallback_rate_limit (nil: allow all)

	mu      sync.Mutex
	buckets map[string]*envoyBucket
	conn    *grpc.ClientConn
	stream  grpc.BidiStreamingClient[rlqspb.RateLimitQuotaUsageReports, rlqspb.RateLimitQuotaResponse]
	send    sync.Mutex
	stop    chan struct{}
	wg      sync.WaitGroup
	// admitted records each admission's instant and bucket.
	admitted []envoyAdmission
	actions  int // actions applied
}

type envoyAdmission struct {
	at     time.Time
	bucket string
}

type envoyBucket struct {
	id              map[string]string
	allowed, denied uint64
	last            time.Time
	kind            string // "", "allow", "deny" or "tb"
	params          *typev3.TokenBucket
	tb              *envoyTB
	expires         time.Time
	fb              *envoyTB
}

// envoyTB is Envoy's TokenBucketImpl: continuous refill.
type envoyTB struct {
	max, rate, tokens float64
	at                time.Time
}

func newEnvoyTB(p *typev3.TokenBucket, full bool, now time.Time) *envoyTB {
	fis := float64(p.GetFillInterval().GetSeconds())
	rate := float64(p.GetTokensPerFill().GetValue()) / fis // a fill interval under 1 s: +Inf, as Envoy divides
	if p.GetTokensPerFill() == nil {
		rate = 1 / (365 * 24 * 3600.0)
	}
	tb := &envoyTB{max: float64(p.GetMaxTokens()), rate: rate, at: now}
	if full {
		tb.tokens = tb.max
	}
	return tb
}

func (tb *envoyTB) refill(now time.Time) {
	tb.tokens = math.Min(tb.max, tb.tokens+tb.rate*now.Sub(tb.at).Seconds())
	tb.at = now
}

func (tb *envoyTB) consume(now time.Time) bool {
	tb.refill(now)
	if tb.tokens >= 1 {
		tb.tokens--
		return true
	}
	return false
}

func newFakeEnvoy(dial func() (*grpc.ClientConn, error), domain string, interval time.Duration) *fakeEnvoy {
	e := &fakeEnvoy{dial: dial, domain: domain, interval: interval, buckets: map[string]*envoyBucket{}, stop: make(chan struct{})}
	e.wg.Go(e.timer)
	return e
}

// Close stops the timer and the stream, as an Envoy that goes away.
func (e *fakeEnvoy) Close() {
	close(e.stop)
	e.mu.Lock()
	if e.conn != nil {
		e.conn.Close()
	}
	e.mu.Unlock()
	e.wg.Wait()
}

// Request decides one request of bucket id, as the filter does.
func (e *fakeEnvoy) Request(id map[string]string) bool {
	now := time.Now()
	name := bucketName(id)
	e.mu.Lock()
	b := e.buckets[name]
	if b == nil {
		b = &envoyBucket{id: id, last: now, allowed: 1}
		e.buckets[name] = b
		e.admitted = append(e.admitted, envoyAdmission{now, name})
		report := e.usage(b, now)
		e.mu.Unlock()
		e.sendReport([]*rlqspb.RateLimitQuotaUsageReports_BucketQuotaUsage{report})
		return true
	}
	ok := true
	switch {
	case b.kind == "" || b.kind == "allow":
	case !now.Before(b.expires): // expired: the fallback
		if e.fallback != nil {
			if b.fb == nil {
				b.fb = newEnvoyTB(e.fallback, true, now)
			}
			ok = b.fb.consume(now)
		}
	case b.kind == "deny":
		ok = false
	case b.kind == "tb":
		ok = b.tb.consume(now)
	}
	if ok {
		b.allowed++
		e.admitted = append(e.admitted, envoyAdmission{now, name})
	} else {
		b.denied++
	}
	e.mu.Unlock()
	return ok
}

// usage is b's report, its counts then reset; e.mu is held.
func (e *fakeEnvoy) usage(b *envoyBucket, now time.Time) *rlqspb.RateLimitQuotaUsageReports_BucketQuotaUsage {
	u := &rlqspb.RateLimitQuotaUsageReports_BucketQuotaUsage{BucketId: &rlqspb.BucketId{Bucket: b.id},
		TimeElapsed:        &durationpb.Duration{Seconds: int64(now.Sub(b.last) / time.Second)},
		NumRequestsAllowed: b.allowed, NumRequestsDenied: b.denied}
	b.allowed, b.denied, b.last = 0, 0, now
	return u
}

func (e *fakeEnvoy) timer() {
	t := time.NewTimer(e.interval)
	defer t.Stop()
	for {
		select {
		case <-e.stop:
			return
		case <-t.C:
		}
		now := time.Now()
		e.mu.Lock()
		var us []*rlqspb.RateLimitQuotaUsageReports_BucketQuotaUsage
		for _, b := range e.buckets {
			us = append(us, e.usage(b, now))
		}
		e.mu.Unlock()
		e.sendReport(us) // Envoy sends one, with no usage, when every bucket went
		t.Reset(e.interval)
	}
}

// sendReport sends usages on the stream, opening it when there is none;
// they are dropped when that fails.
func (e *fakeEnvoy) sendReport(us []*rlqspb.RateLimitQuotaUsageReports_BucketQuotaUsage) {
	e.send.Lock()
	defer e.send.Unlock()
	e.mu.Lock()
	st := e.stream
	e.mu.Unlock()
	if st == nil {
		select {
		case <-e.stop:
			return
		default:
		}
		conn, err := e.dial()
		if err != nil {
			return
		}
		st, err = rlqspb.NewRateLimitQuotaServiceClient(conn).StreamRateLimitQuotas(context.Background())
		if err != nil {
			conn.Close()
			return
		}
		e.mu.Lock()
		if e.conn != nil {
			e.conn.Close()
		}
		e.conn, e.stream = conn, st
		e.mu.Unlock()
		e.wg.Go(func() { e.receive(st) })
	}
	if err := st.Send(&rlqspb.RateLimitQuotaUsageReports{Domain: e.domain, BucketQuotaUsages: us}); err != nil {
		e.mu.Lock()
		if e.stream == st {
			e.stream = nil
		}
		e.mu.Unlock()
	}
}

func (e *fakeEnvoy) receive(st grpc.BidiStreamingClient[rlqspb.RateLimitQuotaUsageReports, rlqspb.RateLimitQuotaResponse]) {
	for {
		resp, err := st.Recv()
		if err != nil {
			e.mu.Lock()
			if e.stream == st {
				e.stream = nil
			}
			e.mu.Unlock()
			return
		}
		now := time.Now()
		e.mu.Lock()
		for _, a := range resp.GetBucketAction() {
			e.apply(a, now)
		}
		e.mu.Unlock()
	}
}

// apply takes one action, as the filter does; e.mu is held.
func (e *fakeEnvoy) apply(a *rlqspb.RateLimitQuotaResponse_BucketAction, now time.Time) {
	name := bucketName(a.GetBucketId().GetBucket())
	b := e.buckets[name]
	if b == nil || len(a.GetBucketId().GetBucket()) == 0 {
		return
	}
	if a.GetAbandonAction() != nil {
		delete(e.buckets, name)
		e.actions++
		return
	}
	qa := a.GetQuotaAssignmentAction()
	s := qa.GetRateLimitStrategy()
	if qa == nil || s == nil || s.GetRequestsPerTimeUnit() != nil {
		return
	}
	e.actions++
	b.expires = now.Add(time.Duration(qa.GetAssignmentTimeToLive().GetSeconds()) * time.Second)
	b.fb = nil
	switch {
	case s.GetTokenBucket() != nil:
		p := s.GetTokenBucket()
		if b.kind == "tb" && p.GetMaxTokens() == b.params.GetMaxTokens() && p.GetTokensPerFill().GetValue() == b.params.GetTokensPerFill().GetValue() &&
			p.GetFillInterval().GetNanos() == b.params.GetFillInterval().GetNanos() {
			return // the same: the bucket and its tokens stay
		}
		full := true
		if b.kind == "tb" && b.tb != nil {
			b.tb.refill(now)
			full = float64(p.GetMaxTokens())*b.tb.tokens/b.tb.max >= 1
		}
		b.kind, b.params, b.tb = "tb", p, newEnvoyTB(p, full, now)
	case s.GetBlanketRule() == typev3.RateLimitStrategy_DENY_ALL:
		b.kind, b.params, b.tb = "deny", nil, nil
	default:
		b.kind, b.params, b.tb = "allow", nil, nil
	}
}

// admissions is a copy of what e admitted.
func (e *fakeEnvoy) admissions() []envoyAdmission {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]envoyAdmission(nil), e.admitted...)
}

// assigned is bucket id's token bucket now (nil: none).
func (e *fakeEnvoy) assigned(id map[string]string) (kind string, p *typev3.TokenBucket) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if b := e.buckets[bucketName(id)]; b != nil {
		return b.kind, b.params
	}
	return "", nil
}
