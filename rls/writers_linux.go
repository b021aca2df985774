//go:build linux

package rls

import (
	"encoding/binary"
	"os"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// writers follows, with an inotify instance of its own, which files of the
// config directory are being written: a file written to (IN_MODIFY) and not
// closed since by a writer (IN_CLOSE_WRITE) is still being written, however
// long its writer pauses. A file removed, or renamed from or into the
// directory, is not (a file renamed in is complete: the way to replace one
// atomically). Watch loads no config while one is being written, for up to
// writerWait after its last write.
type writers struct {
	fd int
	f  *os.File // fd, read through Go's poller so that Close ends the reader

	mu   sync.Mutex
	dir  string
	wd   int                  // the watch on dir, or -1
	open map[string]time.Time // file name → its last write not closed since
}

// newWriters follows dir; nil where inotify cannot be had (Watch then
// relies on the files' sizes and times alone).
func newWriters(dir string) *writers {
	fd, err := unix.InotifyInit1(unix.IN_CLOEXEC | unix.IN_NONBLOCK)
	if err != nil {
		return nil
	}
	w := &writers{fd: fd, f: os.NewFile(uintptr(fd), "inotify"), wd: -1}
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
	w.dir, w.wd, w.open = dir, -1, map[string]time.Time{}
	const mask = unix.IN_MODIFY | unix.IN_CLOSE_WRITE | unix.IN_DELETE | unix.IN_MOVED_FROM | unix.IN_MOVED_TO | unix.IN_ONLYDIR
	if wd, err := unix.InotifyAddWatch(w.fd, dir, mask); err == nil {
		w.wd = wd
	}
}

// busy reports whether a config file is being written at now.
func (w *writers) busy(now time.Time) bool {
	if w == nil {
		return false
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	for name, at := range w.open {
		if configFile(name) && now.Sub(at) < writerWait {
			return true
		}
	}
	return false
}

func (w *writers) close() {
	if w != nil {
		w.f.Close()
	}
}

// read takes the events until close.
func (w *writers) read() {
	buf := make([]byte, 64<<10)
	for {
		n, err := w.f.Read(buf)
		if err != nil {
			return
		}
		w.events(buf[:n], time.Now())
	}
}

// events applies a read of inotify events (struct inotify_event: wd, mask,
// cookie and len as 32-bit integers in the machine's order, then len bytes
// of name padded with NULs).
func (w *writers) events(b []byte, now time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for len(b) >= unix.SizeofInotifyEvent {
		wd := int32(binary.NativeEndian.Uint32(b[0:]))
		mask := binary.NativeEndian.Uint32(b[4:])
		size := int(binary.NativeEndian.Uint32(b[12:]))
		if len(b) < unix.SizeofInotifyEvent+size {
			return
		}
		name := strings.TrimRight(string(b[unix.SizeofInotifyEvent:unix.SizeofInotifyEvent+size]), "\x00")
		b = b[unix.SizeofInotifyEvent+size:]
		switch {
		case mask&unix.IN_Q_OVERFLOW != 0:
			clear(w.open) // events were lost: sizes and times decide
		case int(wd) != w.wd || name == "":
		case mask&unix.IN_MODIFY != 0:
			w.open[name] = now
		case mask&(unix.IN_CLOSE_WRITE|unix.IN_DELETE|unix.IN_MOVED_FROM|unix.IN_MOVED_TO) != 0:
			delete(w.open, name)
		}
	}
}
