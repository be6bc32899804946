package plane

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
)

// A run of real nodes changes the host outside the plane's directory: the
// kubelet and containerd have paths no setting moves, the kubelet tunes
// kernel settings, the bridge plugin turns on IP forwarding. Before each
// such change the run writes down what it is about to create and what it
// found (its footprint, a file under RegistryDir), so that cleanup — the
// test's, `make local-down`'s, or `localplane clean-real-nodes` after a
// crash — removes exactly that, restores exactly that, and nothing else.
// While a footprint is registered, no other run starts: the paths below
// are shared by every kubelet and containerd on the host.

// RegistryDir holds one footprint per run of real nodes on this host.
const RegistryDir = "/run/capscale-real-nodes"

// Host paths a real node writes outside its directory, with no setting to
// move them: the device plugins' socket and checkpoint (kubelet), the
// container log links (kubelet), the CNI result cache (containerd's CNI
// library), the shims' sockets and IO fifos (containerd 1.6).
var sharedDirs = []string{
	"/var/lib/kubelet", "/var/lib/kubelet/device-plugins",
	"/var/log/containers",
	"/var/lib/cni", "/var/lib/cni/results",
	"/run/containerd", "/run/containerd/s", "/run/containerd/fifo",
	// Empty unless a CRI option falls back to runc's default root.
	"/run/containerd/runc",
}

// devicePluginDir is the kubelet's device-plugin directory (a constant of
// the kubelet's device plugin API).
const devicePluginDir = "/var/lib/kubelet/device-plugins"

// tunedSysctls are the kernel settings a real node changes: the kubelet
// sets the first six unless protectKernelDefaults (which fails instead),
// the bridge plugin turns on forwarding for a gateway bridge.
var tunedSysctls = []string{
	"vm/overcommit_memory", "vm/panic_on_oom", "kernel/panic", "kernel/panic_on_oops",
	"kernel/keys/root_maxkeys", "kernel/keys/root_maxbytes",
	"net/ipv4/ip_forward",
}

// footprint is a run's record of the host.
type footprint struct {
	RunID    string `json:"runID"`
	PlaneDir string `json:"planeDir"`
	// Sysctls are the values of tunedSysctls before the run.
	Sysctls map[string]string `json:"sysctls"`
	// CreatedDirs are the sharedDirs that did not exist before the run.
	CreatedDirs []string `json:"createdDirs"`
	// DevicePluginEntries is what devicePluginDir held before the run.
	DevicePluginEntries []string `json:"devicePluginEntries"`
	// Ruleset is `nft list ruleset` before the run: a real node must
	// leave the firewall as it found it.
	Ruleset string          `json:"ruleset"`
	Nodes   []nodeFootprint `json:"nodes"`
	// Tables are the nftables tables of the run's service network
	// ("family name"; realnode_services.go), deleted after its processes.
	Tables []string `json:"tables,omitempty"`

	path string
}

// nodeFootprint is what one node owns: everything under Dir, the cgroups
// under CgroupRoot in every hierarchy, the bridge, the CNI results of
// Network, the container log links into PodLogsDir.
type nodeFootprint struct {
	Name       string `json:"name"`
	Dir        string `json:"dir"`
	CgroupRoot string `json:"cgroupRoot"`
	Bridge     string `json:"bridge"`
	Network    string `json:"network"`
	PodLogsDir string `json:"podLogsDir"`
}

// newFootprint registers a run, refusing while another is registered.
func newFootprint(planeDir string) (*footprint, error) {
	if err := os.MkdirAll(RegistryDir, 0o755); err != nil {
		return nil, err
	}
	others, err := filepath.Glob(filepath.Join(RegistryDir, "*.json"))
	if err != nil {
		return nil, err
	}
	if len(others) > 0 {
		return nil, fmt.Errorf("another run of real nodes is registered on this host (%s): it is running, or it ended without cleanup. "+
			"Stop it (make local-down), or after a crash remove what it left with `go run ./e2e/cmd/localplane clean-real-nodes`", strings.Join(others, ", "))
	}
	id := make([]byte, 3)
	if _, err := rand.Read(id); err != nil {
		return nil, err
	}
	f := &footprint{RunID: hex.EncodeToString(id), PlaneDir: planeDir, Sysctls: map[string]string{}}
	f.path = filepath.Join(RegistryDir, f.RunID+".json")
	for _, s := range tunedSysctls {
		v, err := os.ReadFile(filepath.Join("/proc/sys", s))
		if err != nil {
			return nil, fmt.Errorf("reading sysctl %s: %w", s, err)
		}
		f.Sysctls[s] = strings.TrimSpace(string(v))
	}
	for _, d := range sharedDirs {
		if _, err := os.Lstat(d); errors.Is(err, os.ErrNotExist) {
			f.CreatedDirs = append(f.CreatedDirs, d)
		}
	}
	if entries, err := os.ReadDir(devicePluginDir); err == nil {
		for _, e := range entries {
			f.DevicePluginEntries = append(f.DevicePluginEntries, e.Name())
		}
	}
	if f.Ruleset, err = ruleset(); err != nil {
		return nil, err
	}
	return f, f.save()
}

// loadFootprint reads a registered footprint.
func loadFootprint(path string) (*footprint, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	f := &footprint{path: path}
	if err := json.Unmarshal(b, f); err != nil {
		return nil, fmt.Errorf("reading footprint %s: %w", path, err)
	}
	return f, nil
}

// save writes the footprint; a run saves it before each change it records.
func (f *footprint) save() error {
	b, err := json.MarshalIndent(f, "", "  ")
	if err != nil {
		return err
	}
	tmp := f.path + ".tmp"
	if err := os.WriteFile(tmp, b, 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, f.path)
}

func ruleset() (string, error) {
	out, err := exec.Command("nft", "list", "ruleset").CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("nft list ruleset: %w: %s", err, out)
	}
	return string(out), nil
}

// cleanup undoes the run: every node (nodeFootprint.cleanup), then what the
// nodes shared, then the registration. It goes on past errors and returns
// them all, then checks that nothing of the run is left.
func (f *footprint) cleanup() error {
	var errs []error
	for i := range f.Nodes {
		errs = append(errs, f.Nodes[i].cleanup()...)
	}
	// kube-proxy is gone with the first node: nothing writes them again.
	errs = append(errs, deleteTables(f.Tables)...)
	// The device plugin directory's entries that were not there before.
	if entries, err := os.ReadDir(devicePluginDir); err == nil {
		for _, e := range entries {
			if !slices.Contains(f.DevicePluginEntries, e.Name()) {
				errs = append(errs, removeIfExists(filepath.Join(devicePluginDir, e.Name())))
			}
		}
	}
	// Kernel settings the run changed, back to what they were.
	for s, was := range f.Sysctls {
		p := filepath.Join("/proc/sys", s)
		now, err := os.ReadFile(p)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if strings.TrimSpace(string(now)) != was {
			if err := os.WriteFile(p, []byte(was+"\n"), 0o644); err != nil {
				errs = append(errs, fmt.Errorf("restoring sysctl %s to %s: %w", s, was, err))
			}
		}
	}
	// Shared directories the run created, deepest first, if now empty.
	dirs := slices.Clone(f.CreatedDirs)
	slices.SortFunc(dirs, func(a, b string) int { return len(b) - len(a) })
	for _, d := range dirs {
		if err := os.Remove(d); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, fmt.Errorf("removing %s, which the run created: %w", d, err))
		}
	}
	if err := errors.Join(append(errs, f.leftovers())...); err != nil {
		return err
	}
	if err := os.Remove(f.path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	_ = os.Remove(RegistryDir) // only if no other run is registered
	return nil
}

// leftovers checks the host after cleanup: no process, mount, cgroup,
// bridge or file of the run, the firewall as it was.
func (f *footprint) leftovers() error {
	var left []string
	for _, n := range f.Nodes {
		if pids := n.processes(); len(pids) > 0 {
			left = append(left, fmt.Sprintf("%s: processes %v", n.Name, pids))
		}
		if ms := mountsUnder(n.Dir); len(ms) > 0 {
			left = append(left, fmt.Sprintf("%s: mounts %v", n.Name, ms))
		}
		for _, h := range cgroupMounts() {
			if _, err := os.Stat(filepath.Join(h, n.CgroupRoot)); err == nil {
				left = append(left, fmt.Sprintf("%s: cgroup %s", n.Name, filepath.Join(h, n.CgroupRoot)))
			}
		}
		if linkExists(n.Bridge) {
			left = append(left, fmt.Sprintf("%s: bridge %s", n.Name, n.Bridge))
		}
		if fs := n.sharedFiles(); len(fs) > 0 {
			left = append(left, fmt.Sprintf("%s: files %v", n.Name, fs))
		}
	}
	if now, err := ruleset(); err != nil {
		left = append(left, err.Error())
	} else if now != f.Ruleset {
		left = append(left, fmt.Sprintf("the firewall ruleset changed during the run:\n--- before\n%s\n--- after\n%s", f.Ruleset, now))
	}
	if len(left) > 0 {
		return fmt.Errorf("real nodes left on the host: %s", strings.Join(left, "; "))
	}
	return nil
}

// CleanRealNodes cleans up every run registered on this host (`localplane
// clean-real-nodes`, after a run that could not clean up after itself).
func CleanRealNodes() error {
	paths, err := filepath.Glob(filepath.Join(RegistryDir, "*.json"))
	if err != nil {
		return err
	}
	var errs []error
	for _, p := range paths {
		f, err := loadFootprint(p)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		errs = append(errs, f.cleanup())
	}
	return errors.Join(errs...)
}

func removeIfExists(p string) error {
	if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return nil
}

func linkExists(name string) bool {
	_, err := os.Stat(filepath.Join("/sys/class/net", name))
	return err == nil
}

// readLines returns the lines of a small /proc file.
func readLines(path string) []string {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil
	}
	return strings.Split(string(bytes.TrimRight(b, "\n")), "\n")
}
