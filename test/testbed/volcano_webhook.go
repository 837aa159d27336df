package testbed

import (
	"bytes"
	"context"
	_ "embed"
	"fmt"
	"net"
	"os/exec"
	"path/filepath"
	"strconv"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/jobvault/jobvault/certs/certgen"
)

// volcanoAdmission holds the webhook configurations of Volcano's Helm chart (see the file's header).
//
//go:embed volcano/admission.yaml
var volcanoAdmission []byte

// VolcanoAdmissionOffLabel, set to "off" on a namespace, keeps its objects away from Volcano's
// admission webhooks: the testbed sets the chart's custom.webhooks_namespace_selector_expressions
// to exclude such namespaces. Create one with Env.NamespaceWithoutVolcanoAdmission.
const VolcanoAdmissionOffLabel = "testbed.jobvault.io/volcano-admission"

// startVolcanoWebhook runs vc-webhook-manager with a CA and serving certificate of its own (minted
// into the work dir, never into the repository) and registers the chart's webhook configurations,
// without a caBundle: the manager injects it, as in a real installation, and serves only then.
// It starts after the scheduler has created the default queue, which its queue webhooks would
// otherwise have to admit while nothing serves them yet.
func (e *Env) startVolcanoWebhook() error {
	bin, err := Binary("vc-webhook-manager", "VOLCANO_VERSION")
	if err != nil {
		return err
	}
	ca, err := certgen.NewCA("testbed-volcano-admission-ca", 24*time.Hour)
	if err != nil {
		return err
	}
	certs, err := ca.Issue(certgen.Options{Service: "volcano-admission-service", Namespace: "volcano-system", IPs: []net.IP{net.IPv4(127, 0, 0, 1)}})
	if err != nil {
		return err
	}
	dir := filepath.Join(WorkDir(), "volcano-webhook-certs")
	if err := certs.WriteDir(dir); err != nil {
		return err
	}
	port, err := freePort()
	if err != nil {
		return err
	}
	url := "https://127.0.0.1:" + strconv.Itoa(port)
	configs, err := volcanoAdmissionConfigs(url)
	if err != nil {
		return err
	}
	ctx := context.Background()
	for _, c := range configs {
		if err := e.Client.Create(ctx, c); err != nil {
			return fmt.Errorf("testbed: register Volcano's webhook configuration %s: %w", c.GetName(), err)
		}
	}
	p, err := startProcess("vc-webhook-manager", exec.Command(bin, "--kubeconfig", e.KubeconfigPath,
		"--listen-address=127.0.0.1", "--port="+strconv.Itoa(port), "--webhook-url="+url,
		"--tls-cert-file="+filepath.Join(dir, certgen.CertFile), "--tls-private-key-file="+filepath.Join(dir, certgen.KeyFile),
		"--ca-cert-file="+filepath.Join(dir, certgen.CACertFile), "-v=2"))
	if err != nil {
		return err
	}
	onStop(p.Stop)
	e.VolcanoWebhook = p
	// Ready once the API server runs a VcJob through it: a dry run comes back with its defaults.
	return p.waitFor(60*time.Second, func() error {
		job := Job("default", "testbed-volcano-webhook-probe").Task("main", 1, []string{"main"}).Obj()
		if err := e.Client.Create(ctx, job, client.DryRunAll); err != nil {
			return err
		}
		if job.Spec.Queue == "" {
			return fmt.Errorf("a VcJob was admitted without Volcano's defaults")
		}
		return nil
	})
}

// volcanoAdmissionConfigs reads the chart's configurations and points each webhook at baseURL plus
// its path instead of the in-cluster Service, and adds the VolcanoAdmissionOffLabel exclusion.
func volcanoAdmissionConfigs(baseURL string) ([]client.Object, error) {
	var objs []client.Object
	for _, doc := range bytes.Split(volcanoAdmission, []byte("\n---\n")) {
		var meta metav1.TypeMeta
		if err := yaml.Unmarshal(doc, &meta); err != nil {
			return nil, fmt.Errorf("testbed: parse volcano/admission.yaml: %w", err)
		}
		var webhooks []*admissionregistrationv1.WebhookClientConfig
		var selectors []*metav1.LabelSelector
		var obj client.Object
		switch meta.Kind {
		case "":
			continue // the header
		case "MutatingWebhookConfiguration":
			c := &admissionregistrationv1.MutatingWebhookConfiguration{}
			if err := yaml.UnmarshalStrict(doc, c); err != nil {
				return nil, fmt.Errorf("testbed: parse volcano/admission.yaml: %w", err)
			}
			for i := range c.Webhooks {
				webhooks, selectors = append(webhooks, &c.Webhooks[i].ClientConfig), append(selectors, c.Webhooks[i].NamespaceSelector)
			}
			obj = c
		case "ValidatingWebhookConfiguration":
			c := &admissionregistrationv1.ValidatingWebhookConfiguration{}
			if err := yaml.UnmarshalStrict(doc, c); err != nil {
				return nil, fmt.Errorf("testbed: parse volcano/admission.yaml: %w", err)
			}
			for i := range c.Webhooks {
				webhooks, selectors = append(webhooks, &c.Webhooks[i].ClientConfig), append(selectors, c.Webhooks[i].NamespaceSelector)
			}
			obj = c
		default:
			return nil, fmt.Errorf("testbed: volcano/admission.yaml: unexpected kind %q", meta.Kind)
		}
		for _, cc := range webhooks {
			url := baseURL + *cc.Service.Path
			*cc = admissionregistrationv1.WebhookClientConfig{URL: &url}
		}
		for _, s := range selectors {
			s.MatchExpressions = append(s.MatchExpressions, metav1.LabelSelectorRequirement{
				Key: VolcanoAdmissionOffLabel, Operator: metav1.LabelSelectorOpNotIn, Values: []string{"off"},
			})
		}
		objs = append(objs, obj)
	}
	return objs, nil
}
