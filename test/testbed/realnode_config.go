package testbed

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// cniNetwork names the real node's pod network: its conflist, bridge and the CNI cache entries
// (/var/lib/cni/results/<network>-<id>-<ifname>).
const (
	cniNetwork = "jobvault-testbed"
	cniBridge  = "jvtb0"
	cniSubnet  = "10.250.0.0/24"
	cniBinDir  = "/usr/lib/cni" // Debian's containernetworking-plugins
	// realNodeIP is the node's address, on the loopback interface: the kubelet refuses 127.0.0.1
	// as its node IP, and the API server reaches kubelets at their InternalIP. Nothing outside
	// the machine routes to it.
	realNodeIP = "10.250.255.1"
)

// containerdConfig is containerd's configuration: everything under dir, the CRI's sandbox image
// ours, and restrict_oom_score_adj because this VM grants no CAP_SYS_RESOURCE (containerd would
// fail to lower a container's oom_score_adj below its own).
func (n *RealNode) containerdConfig() string {
	q := strconv.Quote
	return fmt.Sprintf(`version = 2
root = %s
state = %s
disabled_plugins = ["io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.zfs", "io.containerd.tracing.processor.v1.otlp", "io.containerd.internal.v1.tracing"]

[grpc]
  address = %s

[ttrpc]
  address = %s

[metrics]
  address = ""

[plugins."io.containerd.internal.v1.opt"]
  path = %s

[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = %s
  restrict_oom_score_adj = true
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
  enable_cdi = false
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
        Root = %s
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = %s
    conf_dir = %s
`, q(filepath.Join(n.dir, "containerd", "root")), q(filepath.Join(n.dir, "containerd", "state")),
		q(n.socket), q(n.socket+".ttrpc"), q(filepath.Join(n.dir, "containerd", "opt")),
		q(PauseImage), q(filepath.Join(n.dir, "runc")), q(cniBinDir), q(filepath.Join(n.dir, "cni", "net.d")))
}

// cniConfig is a bridge on the machine with host-local addresses: enough for the node to be Ready
// and pods to get an address. The bridge is no gateway and masquerades nothing: no pod traffic
// leaves its network namespace, and no test sends traffic to a pod.
func (n *RealNode) cniConfig() string {
	return fmt.Sprintf(`{
  "cniVersion": "0.4.0",
  "name": %q,
  "plugins": [{
    "type": "bridge", "bridge": %q, "isGateway": false, "ipMasq": false,
    "ipam": {"type": "host-local", "ranges": [[{"subnet": %q}]], "dataDir": %q}
  }]
}
`, cniNetwork, cniBridge, cniSubnet, filepath.Join(n.dir, "cni", "ipam"))
}

// kubeletConfig is the kubelet's configuration. What this machine needs: failCgroupV1 false (it
// mounts cgroup v1), the cgroupfs driver (no systemd), oomScoreAdj 0 (no CAP_SYS_RESOURCE to go
// below), no iptables chains. The server listens on realNodeIP only, an address of the loopback
// interface; the API server presents no client certificate to kubelets in the testbed (envtest
// configures none), so the kubelet serves anonymous requests, as KWOK does, and only to the
// machine itself. Eviction and image GC are as
// low as they go: the machine's disk is shared and tests must not lose their pods or images to it.
func (n *RealNode) kubeletConfig() string {
	o := n.Options
	return fmt.Sprintf(`apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: %s
port: %d
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: %d
authentication:
  anonymous: {enabled: true}
  webhook: {enabled: false}
authorization:
  mode: AlwaysAllow
failCgroupV1: false
cgroupDriver: cgroupfs
oomScoreAdj: 0
makeIPTablesUtilChains: false
protectKernelDefaults: false
containerRuntimeEndpoint: unix://%s
podLogsDir: %s
containerLogMaxSize: %s
containerLogMaxFiles: %d
containerLogMonitorInterval: %s
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
evictionHard: {"memory.available": "1Mi", "nodefs.available": "1%%", "imagefs.available": "1%%", "nodefs.inodesFree": "1%%"}
registerWithTaints:
- {key: %s, value: %s, effect: NoSchedule}
rotateCertificates: false
serverTLSBootstrap: false
staticPodPath: ""
syncFrequency: 10s
nodeStatusUpdateFrequency: 2s
fileCheckFrequency: 20s
maxPods: 110
resolvConf: /etc/resolv.conf
%s`, realNodeIP, n.port, n.healthzPort, n.socket, n.PodLogsDir(), o.LogMaxSize, o.LogMaxFiles, o.LogMonitorInterval,
		RealNodeLabel, RealNodeLabelValue, crashLoopConfig(o.CrashLoopMaxBackoff))
}

// crashLoopConfig caps CrashLoopBackOff's delay at max, if set.
func crashLoopConfig(max time.Duration) string {
	if max == 0 {
		return ""
	}
	return fmt.Sprintf("featureGates: {KubeletCrashLoopBackOffMax: true}\ncrashLoopBackOff: {maxContainerRestartPeriod: %s}\n", max)
}

// kubeletArgs are the kubelet's flags: what its configuration file cannot say (the container GC
// settings are flags only).
func (n *RealNode) kubeletArgs(kubeconfig string) []string {
	o := n.Options
	return []string{
		"--config=" + filepath.Join(n.dir, "kubelet.yaml"),
		"--kubeconfig=" + kubeconfig,
		"--root-dir=" + filepath.Join(n.dir, "kubelet"),
		"--hostname-override=" + n.Name,
		"--node-ip=" + realNodeIP,
		"--node-labels=" + RealNodeLabel + "=" + RealNodeLabelValue,
		"--minimum-container-ttl-duration=" + o.MinContainerTTL.String(),
		"--maximum-dead-containers-per-container=" + strconv.Itoa(o.MaxDeadPerContainer),
		"--maximum-dead-containers=" + strconv.Itoa(o.MaxDeadContainers),
		"--v=2",
		// Every request the kubelet serves, logged with its URI when it ends (LogRequests).
		"--vmodule=httplog=3",
	}
}

// writeConfigs writes containerd's, the CNI's and the kubelet's configurations under n.dir.
func (n *RealNode) writeConfigs() error {
	for _, f := range []struct{ path, data string }{
		{filepath.Join(n.dir, "containerd.toml"), n.containerdConfig()},
		{filepath.Join(n.dir, "cni", "net.d", "10-"+cniNetwork+".conflist"), n.cniConfig()},
		{filepath.Join(n.dir, "kubelet.yaml"), n.kubeletConfig()},
	} {
		if err := os.MkdirAll(filepath.Dir(f.path), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(f.path, []byte(strings.TrimLeft(f.data, "\n")), 0o644); err != nil {
			return err
		}
	}
	return nil
}
