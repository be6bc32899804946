package plane

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"

	"golang.org/x/sys/unix"
)

// The suite runs as three go test processes at once (hack/e2e.sh). A port
// one of them picked and released, and whose process has not bound it yet
// (the extender's is picked before the plane starts, seconds ahead), passes
// the others' listen check, and two processes get the same port: CI saw
// the extender exit before ready. So a picked port is also locked, one
// byte of a shared file per port, for the life of the process that picked
// it; the kernel drops the locks when that process ends, however it ends.

// portLocks hands out each port once per process and not at all while
// another process holds it.
type portLocks struct {
	path  string
	mu    sync.Mutex
	file  *os.File
	ports map[int]bool
}

// locks is the machine's one lock file, per user so that no other user's
// file mode stands in the way.
var locks = &portLocks{path: filepath.Join(os.TempDir(), fmt.Sprintf("capscale-e2e-ports-%d.lock", os.Getuid()))}

// reserve takes port for this process, or says another holds it (or this
// process handed it out before).
func (l *portLocks) reserve(port int) (bool, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.ports[port] {
		return false, nil
	}
	if l.file == nil {
		f, err := os.OpenFile(l.path, os.O_RDWR|os.O_CREATE, 0o600)
		if err != nil {
			return false, fmt.Errorf("opening the port lock file: %w", err)
		}
		l.file, l.ports = f, map[int]bool{}
	}
	// An open file description lock: unlike a classic fcntl lock it is not
	// dropped when some other descriptor of the file closes.
	lk := unix.Flock_t{Type: unix.F_WRLCK, Whence: io.SeekStart, Start: int64(port), Len: 1}
	err := unix.FcntlFlock(l.file.Fd(), unix.F_OFD_SETLK, &lk)
	if errors.Is(err, unix.EAGAIN) || errors.Is(err, unix.EACCES) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("locking port %d in %s: %w", port, l.path, err)
	}
	l.ports[port] = true
	return true, nil
}
