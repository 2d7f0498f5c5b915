package release

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"path"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/partial"
	"github.com/google/go-containerregistry/pkg/v1/static"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"sigs.k8s.io/yaml"
)

// Helm's OCI media types (helm push writes these; helm pull and install
// oci:// read them).
const (
	HelmConfigMediaType = "application/vnd.cncf.helm.config.v1+json"
	HelmChartMediaType  = "application/vnd.cncf.helm.chart.content.v1.tar+gzip"
)

// ChartMetadata reads Chart.yaml from a packaged chart (helm package's .tgz).
func ChartMetadata(tgz []byte) (map[string]any, error) {
	zr, err := gzip.NewReader(bytes.NewReader(tgz))
	if err != nil {
		return nil, err
	}
	tr := tar.NewReader(zr)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil, fmt.Errorf("chart: no Chart.yaml")
		}
		if err != nil {
			return nil, err
		}
		if path.Base(h.Name) == "Chart.yaml" && path.Dir(path.Clean(h.Name)) != "." && path.Dir(path.Dir(path.Clean(h.Name))) == "." {
			b, err := io.ReadAll(tr)
			if err != nil {
				return nil, err
			}
			var m map[string]any
			return m, yaml.Unmarshal(b, &m)
		}
	}
}

// ChartArtifact is a packaged chart as the OCI artifact helm push makes:
// the Chart.yaml metadata as config, the .tgz as the one layer, and the
// OCI annotations Artifact Hub and registries show.
func ChartArtifact(tgz []byte) (v1.Image, error) {
	meta, err := ChartMetadata(tgz)
	if err != nil {
		return nil, err
	}
	cfg, err := json.Marshal(meta)
	if err != nil {
		return nil, err
	}
	layer := static.NewLayer(tgz, HelmChartMediaType)
	ld, err := partial.Descriptor(layer)
	if err != nil {
		return nil, err
	}
	cd, err := partial.Descriptor(static.NewLayer(cfg, HelmConfigMediaType))
	if err != nil {
		return nil, err
	}
	ann := map[string]string{}
	for k, v := range map[string]string{"org.opencontainers.image.title": "name", "org.opencontainers.image.version": "version", "org.opencontainers.image.description": "description", "org.opencontainers.image.url": "home"} {
		if s, ok := meta[v].(string); ok {
			ann[k] = s
		}
	}
	m := v1.Manifest{SchemaVersion: 2, MediaType: types.OCIManifestSchema1, Config: *cd, Layers: []v1.Descriptor{*ld}, Annotations: ann}
	raw, err := json.Marshal(m)
	if err != nil {
		return nil, err
	}
	return partial.CompressedToImage(&chartImage{manifest: raw, config: cfg, configDigest: cd.Digest, layer: layer})
}

// chartImage is an image whose config is not an image config (ggcr's
// mutate only writes those): the raw manifest and blobs, served as is.
type chartImage struct {
	manifest, config []byte
	configDigest     v1.Hash
	layer            v1.Layer
}

func (c *chartImage) RawConfigFile() ([]byte, error)      { return c.config, nil }
func (c *chartImage) MediaType() (types.MediaType, error) { return types.OCIManifestSchema1, nil }
func (c *chartImage) RawManifest() ([]byte, error)        { return c.manifest, nil }
func (c *chartImage) LayerByDigest(h v1.Hash) (partial.CompressedLayer, error) {
	if d, _ := c.layer.Digest(); d == h {
		return c.layer, nil
	}
	if h == c.configDigest {
		return static.NewLayer(c.config, HelmConfigMediaType), nil
	}
	return nil, fmt.Errorf("chart artifact: no blob %s", h)
}
