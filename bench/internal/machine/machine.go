// Package machine is what both benchmark programs need of the machine they
// run on: a free loopback port, and the CPU's name and count.
package machine

import (
	"bufio"
	"log"
	"net"
	"os"
	"runtime"
	"strings"
	"sync"
)

// FreePort is a TCP port on 127.0.0.1 that nothing listens on now, never
// one it returned before in this process.
func FreePort() int {
	freeMu.Lock()
	defer freeMu.Unlock()
	for {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			log.Fatal(err)
		}
		port := l.Addr().(*net.TCPAddr).Port
		l.Close()
		// The kernel may hand a port it just gave back out again: one a
		// service was told to listen on, and not yet listening (a gRPC port
		// that came back as the same service's metrics port).
		if !given[port] {
			given[port] = true
			return port
		}
	}
}

var (
	freeMu sync.Mutex
	given  = map[int]bool{}
)

// CPU is the CPU's model name (the architecture when /proc/cpuinfo
// does not say) and the number of CPUs.
func CPU() (string, int) {
	f, err := os.Open("/proc/cpuinfo")
	if err != nil {
		return runtime.GOARCH, runtime.NumCPU()
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "model name"); ok {
			return strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(v), ":")), runtime.NumCPU()
		}
	}
	return runtime.GOARCH, runtime.NumCPU()
}
