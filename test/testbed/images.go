package testbed

import (
	"archive/tar"
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// The real node's images: built here from jobvault's own programs and imported into containerd,
// since no registry is reachable. Pods use them with imagePullPolicy Never.
const (
	// PauseImage is the sandbox image (test/testbed/pause).
	PauseImage = "jobvault.local/testbed/pause:dev"
	// WorkloadImage runs test/workload.
	WorkloadImage = "jobvault.local/testbed/workload:dev"
)

// programImage packs the static binary bin as /<name>, the image's entrypoint, into a one-layer
// image tagged ref and writes it as an image archive (docker save's format, which `ctr images
// import` reads) to out.
func programImage(ref, bin, out string) error {
	data, err := os.ReadFile(bin)
	if err != nil {
		return fmt.Errorf("read %s: %w", bin, err)
	}
	entry := "/" + filepath.Base(bin)
	var layerTar bytes.Buffer
	tw := tar.NewWriter(&layerTar)
	if err := tw.WriteHeader(&tar.Header{Name: entry[1:], Mode: 0o755, Size: int64(len(data)), Typeflag: tar.TypeReg}); err != nil {
		return err
	}
	if _, err := tw.Write(data); err != nil {
		return err
	}
	if err := tw.Close(); err != nil {
		return err
	}
	layer, err := tarball.LayerFromReader(bytes.NewReader(layerTar.Bytes()))
	if err != nil {
		return fmt.Errorf("layer of %s: %w", bin, err)
	}
	img, err := mutate.AppendLayers(empty.Image, layer)
	if err != nil {
		return err
	}
	cfg, err := img.ConfigFile()
	if err != nil {
		return err
	}
	cfg = cfg.DeepCopy()
	cfg.OS, cfg.Architecture = "linux", runtime.GOARCH
	cfg.Config = v1.Config{Entrypoint: []string{entry}}
	if img, err = mutate.ConfigFile(img, cfg); err != nil {
		return err
	}
	tag, err := name.NewTag(ref)
	if err != nil {
		return err
	}
	if err := tarball.WriteToFile(out, tag, img); err != nil {
		return fmt.Errorf("write image %s: %w", ref, err)
	}
	return nil
}

// importImages builds the pause and workload programs, packs each into an image and imports it
// into containerd's k8s.io namespace (the one the CRI uses), unpacked for its snapshotter.
func (n *RealNode) importImages() error {
	for _, img := range []struct{ ref, pkg string }{
		{PauseImage, "./test/testbed/pause"},
		{WorkloadImage, "./test/workload"},
	} {
		bin, err := goBuild(img.pkg)
		if err != nil {
			return err
		}
		archive := filepath.Join(n.dir, "images", filepath.Base(img.pkg)+".tar")
		if err := os.MkdirAll(filepath.Dir(archive), 0o755); err != nil {
			return err
		}
		if err := programImage(img.ref, bin, archive); err != nil {
			return err
		}
		if out, err := n.ctr("images", "import", archive); err != nil {
			return fmt.Errorf("import %s into containerd: %w: %s", img.ref, err, out)
		}
	}
	return nil
}

// ctr runs containerd's client against the node's containerd, in the CRI's namespace.
func (n *RealNode) ctr(args ...string) ([]byte, error) {
	cmd := exec.Command("ctr", append([]string{"--address", n.socket, "--namespace", "k8s.io"}, args...)...)
	return cmd.CombinedOutput()
}
