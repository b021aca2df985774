package admit

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/seed-6b3823f5/ratelimit/client"
)

// With Options.Pipeline the gate's Redis calls are pipelined: each step a
// decision sends waits in a queue, and one sender takes everything queued
// at once and sends it in one round trip (a client.Batch). Idle, a step
// goes out at once, alone; under load, one write and one read carry many
// requests' steps, which is what made rls cheaper than one round trip per
// request. One sender measured best (bench/rls: 2 and 4 senders made
// smaller batches and more system calls for no more calls per second).
const (
	maxBatch = 128  // calls in one round trip, at most
	queued   = 4096 // calls waiting, at most; past that a request waits its turn
)

// job is one call of one request: a step of its decision, in one command
// (RL.ALL when several limits).
type job struct {
	ctx  context.Context // the request's: a request gone is not sent
	step step
	conc *concCall // instead of step: a concurrency slot taken or freed
	call *client.Call
	each []client.Result // the call's results per limit, for a step of several
	done chan error
}

// concCall is CONC.ACQUIRE (acquire) or CONC.RELEASE as a job carries it,
// and its answer: res for an acquire, freed for a release.
type concCall struct {
	acquire bool
	key, id string
	limit   client.Concurrency
	reserve int64
	res     client.Result
	freed   bool
}

type pipeline struct {
	c       *client.Client
	jobs    chan *job
	stop    chan struct{} // closed by close: the sender ends
	closing sync.Once
	timeout time.Duration
	sent    func(took time.Duration, err error) // each step's round trip
}

func newPipeline(c *client.Client, timeout time.Duration, sent func(time.Duration, error)) *pipeline {
	p := &pipeline{c: c, jobs: make(chan *job, queued), stop: make(chan struct{}), timeout: timeout, sent: sent}
	go p.send()
	return p
}

// do decides a step in the next round trip, or fails when ctx ends first.
func (p *pipeline) do(ctx context.Context, st step) error {
	return p.wait(ctx, &job{ctx: ctx, step: st, done: make(chan error, 1)})
}

// slot sends c in the next round trip (c holds its answer), or fails when
// ctx ends first.
func (p *pipeline) slot(ctx context.Context, c *concCall) error {
	return p.wait(ctx, &job{ctx: ctx, conc: c, done: make(chan error, 1)})
}

// wait queues j and waits for its answer.
func (p *pipeline) wait(ctx context.Context, j *job) error {
	select {
	case p.jobs <- j:
	case <-ctx.Done():
		return ctx.Err()
	case <-p.stop:
		return errClosed
	}
	select {
	case err := <-j.done:
		return err
	case <-ctx.Done():
		return ctx.Err() // the call may still be sent; its answer is dropped
	case <-p.stop:
		return errClosed
	}
}

// errClosed is a step sent after the gate was closed.
var errClosed = errors.New("admit: the gate is closed")

// close ends the sender; calls waiting fail with errClosed.
func (p *pipeline) close() { p.closing.Do(func() { close(p.stop) }) }

func (p *pipeline) send() {
	batch := make([]*job, 0, maxBatch)
	for {
		var j *job
		select {
		case j = <-p.jobs:
		case <-p.stop:
			return
		}
		batch = append(batch[:0], j)
	more:
		for len(batch) < maxBatch {
			select {
			case j := <-p.jobs:
				batch = append(batch, j)
			default:
				break more
			}
		}
		p.exec(batch)
	}
}

// exec sends one batch and hands each job its answer.
func (p *pipeline) exec(batch []*job) {
	b := p.c.Batch()
	sent := 0
	for _, j := range batch {
		if err := j.ctx.Err(); err != nil {
			j.done <- err // the caller is gone: Redis is not asked
			continue
		}
		switch c := j.conc; {
		case c == nil:
			j.call, j.each = queue(b, j.step.wants)
		case c.acquire:
			j.call = b.Acquire(c.key, c.limit, c.id, client.Reserve(c.reserve))
		default:
			j.call = b.Release(c.key, c.id)
		}
		sent++
	}
	if sent == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), p.timeout)
	start := time.Now()
	err := b.Exec(ctx)
	cancel()
	took := time.Since(start)
	for range sent {
		p.sent(took, err)
	}
	for _, j := range batch {
		if j.call == nil {
			continue
		}
		var err error
		switch c := j.conc; {
		case c == nil:
			var r client.Result
			if r, err = j.call.Result(); err == nil {
				j.answer(r)
			}
		case c.acquire:
			c.res, err = j.call.Result()
		default:
			c.freed, err = j.call.Released()
		}
		j.done <- err
	}
}

// queue adds the call of a step that is not watched to b (as
// planner.send sends it alone): the family's command for one want, RL.ALL
// EACH for several, with their reserve or DEBT; each is the results per
// limit of the latter.
func queue(b *client.Batch, wants []*Want) (*client.Call, []client.Result) {
	var opts []client.Option
	switch w := wants[0]; {
	case w.Debt:
		opts = []client.Option{client.Debt()}
	case w.Reserve != 0:
		opts = []client.Option{client.Reserve(w.Reserve)}
	}
	if len(wants) == 1 {
		w := wants[0]
		return b.Take(w.Key, w.Limit, w.Cost, opts...), nil
	}
	each := make([]client.Result, len(wants))
	return b.AllEach(keyedOf(wants, make([]client.Keyed, 0, len(wants))), each, opts...), each
}

// answer fills the job's wants from its call's Result r.
func (j *job) answer(r client.Result) {
	if j.each != nil {
		fill(j.step.wants, j.each, r.Limited)
		return
	}
	w := j.step.wants[0]
	w.Result, w.Known, w.Taken = r, true, !r.Limited || w.Debt
}
