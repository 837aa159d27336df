// Package apiserver serves jobvault's archive as the aggregated API archive.jobvault.io/v1alpha1,
// read-only, with k8s.io/apiserver: archivedjobs (get by name or UID, list in keyset pages with
// field selectors, a table for kubectl get) and their log subresource, streamed from the object
// store. Authentication and authorization are delegated to the cluster (TokenReview,
// SubjectAccessReview), as metrics-server does; a read of the archive is allowed where the same
// read of the live objects is (see mirror). It reads the database as the read-only
// jobvault_reader role and the store with read-only credentials.
//
// It runs as the program apiserver (archiver/apiserver, Main).
package apiserver

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"

	"github.com/spf13/pflag"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	openapinamer "k8s.io/apiserver/pkg/endpoints/openapi"
	"k8s.io/apiserver/pkg/registry/rest"
	genericapiserver "k8s.io/apiserver/pkg/server"
	"k8s.io/apiserver/pkg/server/healthz"
	genericoptions "k8s.io/apiserver/pkg/server/options"
	utilcompatibility "k8s.io/apiserver/pkg/util/compatibility"

	"github.com/jobvault/jobvault/pkg/apiserver/v1alpha1"
	"github.com/jobvault/jobvault/pkg/db"
	"github.com/jobvault/jobvault/pkg/objstore"
)

var (
	// Scheme holds the archive's types and the meta types its responses use.
	Scheme = runtime.NewScheme()
	// Codecs serve Scheme.
	Codecs = serializer.NewCodecFactory(Scheme)
)

func init() {
	if err := v1alpha1.AddToScheme(Scheme); err != nil {
		panic(err)
	}
	// The unversioned meta types every API server serves (Status, APIVersions, …).
	metav1.AddToGroupVersion(Scheme, schema.GroupVersion{Version: "v1"})
	unversioned := schema.GroupVersion{Group: "", Version: "v1"}
	Scheme.AddUnversionedTypes(unversioned, &metav1.Status{}, &metav1.APIVersions{}, &metav1.APIGroupList{},
		&metav1.APIGroup{}, &metav1.APIResourceList{})
}

// Options configure the archive API server: how it serves and authenticates (k8s.io/apiserver's
// options and flags), and where the archive is.
type Options struct {
	SecureServing  *genericoptions.SecureServingOptionsWithLoopback
	Authentication *genericoptions.DelegatingAuthenticationOptions
	Authorization  *genericoptions.DelegatingAuthorizationOptions
	Audit          *genericoptions.AuditOptions

	DB    db.Config
	Store objstore.Config
	// Cluster keeps to the jobs of this cluster, for databases shared by several; empty: all.
	Cluster string
}

// NewOptions returns the defaults: port 8443, delegated authentication and authorization.
func NewOptions() *Options {
	o := &Options{
		SecureServing:  genericoptions.NewSecureServingOptions().WithLoopback(),
		Authentication: genericoptions.NewDelegatingAuthenticationOptions(),
		Authorization:  genericoptions.NewDelegatingAuthorizationOptions(),
		Audit:          genericoptions.NewAuditOptions(),
	}
	o.SecureServing.BindPort = 8443
	return o
}

// AddFlags registers every option's flags on fs: k8s.io/apiserver's (--secure-port,
// --tls-cert-file, --authentication-kubeconfig, …) and jobvault's (--db-*, --store-*,
// --cluster-name).
func (o *Options) AddFlags(fs *pflag.FlagSet) {
	o.SecureServing.AddFlags(fs)
	o.Authentication.AddFlags(fs)
	o.Authorization.AddFlags(fs)
	o.Audit.AddFlags(fs)
	own := flag.NewFlagSet("archive", flag.ContinueOnError)
	o.DB.BindFlags(own)
	o.Store.BindFlags(own)
	own.StringVar(&o.Cluster, "cluster-name", "", "Serve only the jobs of this cluster, for databases shared by several clusters; empty: every job.")
	fs.AddGoFlagSet(own)
}

// Validate reports every problem of the options at once.
func (o *Options) Validate() error {
	var errs []error
	errs = append(errs, o.SecureServing.Validate()...)
	errs = append(errs, o.Authentication.Validate()...)
	errs = append(errs, o.Authorization.Validate()...)
	errs = append(errs, o.Audit.Validate()...)
	errs = append(errs, o.DB.Validate(), o.Store.Validate())
	return errors.Join(errs...)
}

// serverConfig builds k8s.io/apiserver's configuration: serving, delegated authentication, the
// mirroring authorizer over the delegated one, the log's gzip pass-through, audit, OpenAPI.
func (o *Options) serverConfig() (*genericapiserver.Config, error) {
	if err := o.SecureServing.MaybeDefaultWithSelfSignedCerts("localhost", nil, []net.IP{net.IPv4(127, 0, 0, 1)}); err != nil {
		return nil, fmt.Errorf("create self-signed certificates: %w", err)
	}
	cfg := genericapiserver.NewConfig(Codecs)
	if err := o.SecureServing.ApplyTo(&cfg.SecureServing, &cfg.LoopbackClientConfig); err != nil {
		return nil, fmt.Errorf("configure serving: %w", err)
	}
	if err := o.Authentication.ApplyTo(&cfg.Authentication, cfg.SecureServing, nil); err != nil {
		return nil, fmt.Errorf("configure authentication: %w", err)
	}
	if err := o.Authorization.ApplyTo(&cfg.Authorization); err != nil {
		return nil, fmt.Errorf("configure authorization: %w", err)
	}
	cfg.Authorization.Authorizer = mirror{delegate: cfg.Authorization.Authorizer}
	cfg.BuildHandlerChainFunc = buildHandlerChain
	if err := o.Audit.ApplyTo(cfg); err != nil {
		return nil, fmt.Errorf("configure audit: %w", err)
	}
	namer := openapinamer.NewDefinitionNamer(Scheme)
	cfg.OpenAPIConfig = genericapiserver.DefaultOpenAPIConfig(openAPIDefinitions, namer)
	cfg.OpenAPIConfig.Info.Title, cfg.OpenAPIConfig.Info.Version = "jobvault archive", "v1alpha1"
	cfg.OpenAPIV3Config = genericapiserver.DefaultOpenAPIV3Config(openAPIDefinitions, namer)
	cfg.OpenAPIV3Config.Info.Title, cfg.OpenAPIV3Config.Info.Version = "jobvault archive", "v1alpha1"
	cfg.EffectiveVersion = utilcompatibility.DefaultBuildEffectiveVersion()
	return cfg, nil
}

// New builds the server over records and store, ready to run.
func New(o *Options, records Records, store objstore.Store) (*genericapiserver.GenericAPIServer, error) {
	switch {
	case records == nil:
		return nil, errors.New("new archive API server: nil records")
	case store == nil:
		return nil, errors.New("new archive API server: nil store")
	}
	cfg, err := o.serverConfig()
	if err != nil {
		return nil, fmt.Errorf("new archive API server: %w", err)
	}
	server, err := cfg.Complete(nil).New("jobvault-archive", genericapiserver.NewEmptyDelegate())
	if err != nil {
		return nil, fmt.Errorf("new archive API server: %w", err)
	}
	jobs := &jobsREST{records: records, cluster: o.Cluster}
	info := genericapiserver.NewDefaultAPIGroupInfo(v1alpha1.GroupName, Scheme, runtime.NewParameterCodec(Scheme), Codecs)
	info.VersionedResourcesStorageMap[v1alpha1.SchemeGroupVersion.Version] = map[string]rest.Storage{
		v1alpha1.Resource: jobs,
		v1alpha1.Resource + "/" + v1alpha1.LogSubresource:    &logREST{jobs: jobs, store: store},
		v1alpha1.Resource + "/" + v1alpha1.VerifySubresource: newVerifyREST(jobs, store),
	}
	if err := server.InstallAPIGroup(&info); err != nil {
		return nil, fmt.Errorf("new archive API server: install %s: %w", v1alpha1.GroupName, err)
	}
	return server, nil
}

// pinger is what readiness asks of a backend.
type pinger interface {
	Ping(ctx context.Context) error
}

// Run opens the database and the store, serves until ctx ends, then closes them. /readyz fails
// while either does not answer.
func Run(ctx context.Context, o *Options) error {
	records, err := db.Open(ctx, o.DB.DSN, o.DB.Options)
	if err != nil {
		return err
	}
	defer records.Close()
	store, err := objstore.New(ctx, o.Store)
	if err != nil {
		return fmt.Errorf("open object store: %w", err)
	}
	server, err := New(o, records, store)
	if err != nil {
		return err
	}
	checks := []healthz.HealthChecker{healthz.NamedCheck("database", func(r *http.Request) error { return records.Ping(r.Context()) })}
	if p, ok := store.(pinger); ok {
		checks = append(checks, healthz.NamedCheck("store", func(r *http.Request) error { return p.Ping(r.Context()) }))
	}
	if err := server.AddReadyzChecks(checks...); err != nil {
		return fmt.Errorf("add readiness checks: %w", err)
	}
	return server.PrepareRun().RunWithContext(ctx)
}

// Main is the apiserver program: it parses args, validates every option and serves until ctx ends. It
// returns the process's exit code.
func Main(ctx context.Context, args []string, stderr io.Writer) int {
	o := NewOptions()
	fs := pflag.NewFlagSet("apiserver", pflag.ContinueOnError)
	fs.SetOutput(stderr)
	o.AddFlags(fs)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, pflag.ErrHelp) {
			return 0
		}
		return 2
	}
	if err := o.Validate(); err != nil {
		fmt.Fprintf(stderr, "apiserver: invalid configuration:\n%v\n", err)
		return 2
	}
	if err := Run(ctx, o); err != nil {
		fmt.Fprintln(stderr, "apiserver:", err)
		return 1
	}
	return 0
}
