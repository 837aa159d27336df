package archiver

import (
	"net/http"
	"strings"
	"sync"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"
)

// NewRESTMapper is the manager's REST mapper: controller-runtime's dynamic one, with the mappings
// it finds remembered (see knownMappings).
func NewRESTMapper(cfg *rest.Config, hc *http.Client) (meta.RESTMapper, error) {
	m, err := apiutil.NewDynamicRESTMapper(cfg, hc)
	if err != nil {
		return nil, err
	}
	return &knownMappings{RESTMapper: m}, nil
}

// knownMappings remembers each REST mapping its mapper found. With --namespaces, controller-runtime's
// cache asks the mapper whether a kind is namespaced at every read of the cache (every Get and
// List of a pod or job), and the dynamic mapper answers by searching every group version it
// loaded: 7.7 % of the archiver's CPU while BenchmarkReleaseThroughput drains. A found mapping is
// kept for good, as the dynamic mapper keeps the group versions it loaded and each informer the
// scope it started with: a kind deleted and created again with another scope takes a restart
// either way. A kind not found is asked again, so one installed later is found.
type knownMappings struct {
	meta.RESTMapper
	found sync.Map // mappingKey -> meta.RESTMapping
}

type mappingKey struct {
	gk       schema.GroupKind
	versions string
}

func (m *knownMappings) RESTMapping(gk schema.GroupKind, versions ...string) (*meta.RESTMapping, error) {
	key := mappingKey{gk: gk, versions: strings.Join(versions, "\x00")} // no version holds a NUL
	if v, ok := m.found.Load(key); ok {
		mapping := v.(meta.RESTMapping) // a copy each: a caller may change what it is given
		return &mapping, nil
	}
	mapping, err := m.RESTMapper.RESTMapping(gk, versions...)
	if err != nil {
		return nil, err
	}
	m.found.Store(key, *mapping)
	return mapping, nil
}
