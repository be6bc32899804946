package main

import (
	"crypto/sha256"
	"runtime"
	"time"

	"golang.org/x/sys/unix"
)

// speedWork is the fixed piece of work workTime times: hashing 1 MiB.
var speedWork = make([]byte, 1<<20)

// workTime is the CPU time one thread spends on speedWork. Time the thread
// waits for a core is not in it, so on a machine whose cores are merely
// busy it stays put; it grows when the core itself runs slower for the
// same work (a neighbour on its other hyperthread or in its cache, a lower
// clock), which /proc/stat's steal does not show. 0 if it cannot be read.
func workTime() time.Duration {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	var a, b unix.Timespec
	if unix.ClockGettime(unix.CLOCK_THREAD_CPUTIME_ID, &a) != nil {
		return 0
	}
	sum := sha256.Sum256(speedWork)
	if unix.ClockGettime(unix.CLOCK_THREAD_CPUTIME_ID, &b) != nil {
		return 0
	}
	runtime.KeepAlive(sum)
	return time.Duration(b.Nano() - a.Nano())
}
