//go:build linux

package rls

import (
	"encoding/binary"
	"errors"
	"os"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// writers follows, with an inotify instance of its own, which files of the
// config directory are open: a file opened (IN_OPEN) and not closed since
// (IN_CLOSE_WRITE, IN_CLOSE_NOWRITE) may be being written, however long its
// writer pauses. A file removed, or renamed from or into the directory, is
// not (a file renamed in is complete: the way to replace one atomically).
// Watch loads no config while one is open, for up to writerWait after the
// last event of it.
//
// Opens are followed, not only writes (IN_MODIFY), because a writer that
// opens with O_TRUNC empties the file inside open(2): the file is seen empty,
// with its old modification time, before the kernel queues the truncation's
// IN_MODIFY, and a writer descheduled there (325 ms, seen on a loaded 2-core
// machine) left an empty file that looked still for longer than settle.
// IN_OPEN is queued before the truncation starts: Linux 6.18, where this was
// traced, queues it as the file is opened, before O_TRUNC is applied (its
// events come OPEN, MODIFY, CLOSE_WRITE). A kernel that queued it only as
// open(2) returns would leave the stalled truncation to sizes and times.
// The kernel does not say whether an open is for writing, so a reader
// holding a file open holds the reload too, for up to writerWait.
//
// Events are read both as they come (a goroutine, which signals a writer's
// close on closed) and at each look (state reads what the kernel has queued
// first), under one lock, so that a look never misses an event the kernel
// queued before it, however late the goroutine runs.
type writers struct {
	fd int
	f  *os.File // fd, read through Go's poller so that Close ends the reader

	closed chan struct{} // a writer closed a config file

	mu   sync.Mutex
	buf  []byte
	dir  string
	wd   int                   // the watch on dir, or -1
	open map[string]*openState // by file name
	gen  uint64                // writes, removals and renames of config files seen
}

// openState is a file's opens not closed since, and when it last had an
// event.
type openState struct {
	n  int
	at time.Time
}

// newWriters follows dir; nil where inotify cannot be had (Watch then
// relies on the files' sizes and times alone).
func newWriters(dir string) *writers {
	fd, err := unix.InotifyInit1(unix.IN_CLOEXEC | unix.IN_NONBLOCK)
	if err != nil {
		return nil
	}
	w := &writers{fd: fd, f: os.NewFile(uintptr(fd), "inotify"), wd: -1, closed: make(chan struct{}, 1), buf: make([]byte, 64<<10)}
	w.follow(dir)
	go w.read()
	return w
}

// follow watches dir instead of the directory followed so far (a symlink
// swap led the config path elsewhere).
func (w *writers) follow(dir string) {
	if w == nil {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if dir == w.dir {
		return
	}
	if w.wd >= 0 {
		_, _ = unix.InotifyRmWatch(w.fd, uint32(w.wd))
	}
	w.dir, w.wd, w.open = dir, -1, map[string]*openState{}
	w.gen++
	const mask = unix.IN_OPEN | unix.IN_MODIFY | unix.IN_CLOSE_WRITE | unix.IN_CLOSE_NOWRITE |
		unix.IN_CREATE | unix.IN_DELETE | unix.IN_MOVED_FROM | unix.IN_MOVED_TO | unix.IN_ONLYDIR
	if wd, err := unix.InotifyAddWatch(w.fd, dir, mask); err == nil {
		w.wd = wd
	}
}

// state reports, having read every event queued so far, whether a config
// file is open at now, and how many writes, removals and renames of config
// files have been seen: a load is good only if the count is the same
// before and after it.
func (w *writers) state(now time.Time) (busy bool, gen uint64) {
	if w == nil {
		return false, 0
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.drainLocked(now)
	for name, o := range w.open {
		if configFile(name) && now.Sub(o.at) < writerWait {
			busy = true
		}
	}
	return busy, w.gen
}

// closes signals a writer's close of a config file; nil where writers are
// not followed.
func (w *writers) closes() <-chan struct{} {
	if w == nil {
		return nil
	}
	return w.closed
}

func (w *writers) close() {
	if w != nil {
		w.f.Close()
	}
}

// read takes the events as they come, until close.
func (w *writers) read() {
	rc, err := w.f.SyscallConn()
	if err != nil {
		return
	}
	// The function reads what is queued and asks to be called again once
	// more is: Read returns only when the file is closed.
	_ = rc.Read(func(uintptr) bool {
		w.mu.Lock()
		defer w.mu.Unlock()
		w.drainLocked(time.Now())
		return false
	})
}

// drainLocked reads and applies every event queued.
func (w *writers) drainLocked(now time.Time) {
	for {
		n, err := unix.Read(w.fd, w.buf)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil || n <= 0 {
			return // EAGAIN: nothing more queued
		}
		w.events(w.buf[:n], now)
	}
}

// events applies a read of inotify events (struct inotify_event: wd, mask,
// cookie and len as 32-bit integers in the machine's order, then len bytes
// of name padded with NULs).
func (w *writers) events(b []byte, now time.Time) {
	for len(b) >= unix.SizeofInotifyEvent {
		wd := int32(binary.NativeEndian.Uint32(b[0:]))
		mask := binary.NativeEndian.Uint32(b[4:])
		size := int(binary.NativeEndian.Uint32(b[12:]))
		if len(b) < unix.SizeofInotifyEvent+size {
			return
		}
		name := strings.TrimRight(string(b[unix.SizeofInotifyEvent:unix.SizeofInotifyEvent+size]), "\x00")
		b = b[unix.SizeofInotifyEvent+size:]
		if mask&unix.IN_Q_OVERFLOW != 0 {
			clear(w.open) // events were lost: sizes and times decide
			w.gen++
			continue
		}
		if int(wd) != w.wd || name == "" || mask&unix.IN_ISDIR != 0 {
			continue
		}
		if mask&(unix.IN_MODIFY|unix.IN_CLOSE_WRITE|unix.IN_CREATE|unix.IN_DELETE|unix.IN_MOVED_FROM|unix.IN_MOVED_TO) != 0 && configFile(name) {
			w.gen++
		}
		o := w.open[name]
		switch {
		case mask&unix.IN_OPEN != 0:
			if o == nil {
				o = &openState{}
				w.open[name] = o
			}
			o.n++
			o.at = now
		case mask&unix.IN_MODIFY != 0:
			if o == nil { // opened before it was followed
				o = &openState{n: 1}
				w.open[name] = o
			}
			o.at = now
		case mask&(unix.IN_CLOSE_WRITE|unix.IN_CLOSE_NOWRITE) != 0:
			if o != nil {
				if o.n--; o.n <= 0 {
					delete(w.open, name)
				} else {
					o.at = now
				}
			}
			if mask&unix.IN_CLOSE_WRITE != 0 && w.open[name] == nil && configFile(name) {
				select {
				case w.closed <- struct{}{}:
				default:
				}
			}
		case mask&(unix.IN_CREATE|unix.IN_DELETE|unix.IN_MOVED_FROM|unix.IN_MOVED_TO) != 0:
			delete(w.open, name) // another file, or none, has the name now
		}
	}
}
