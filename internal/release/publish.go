package release

import (
	"fmt"
	"strings"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/remote"
)

// Publish pushes every manifest of the release's OCI image layout at dir to
// registry, each under the reference its RefAnnotation names (image index,
// platform images, signatures, SBOMs, attestation, chart). registry must
// be the one the release was built for: the signatures name it.
func Publish(dir, registry string, opts ...remote.Option) ([]string, error) {
	p, err := layout.FromPath(dir)
	if err != nil {
		return nil, err
	}
	top, err := p.ImageIndex()
	if err != nil {
		return nil, err
	}
	im, err := top.IndexManifest()
	if err != nil {
		return nil, err
	}
	if built := im.Annotations[RegistryAnnotation]; built != registry {
		return nil, fmt.Errorf("publish: the release in %s was built for %q, not %q (its signatures name the repository): run make release REGISTRY=%s", dir, built, registry, registry)
	}
	var pushed []string
	for _, desc := range im.Manifests {
		rel := desc.Annotations[RefAnnotation]
		if rel == "" || strings.HasPrefix(rel, "/") {
			return nil, fmt.Errorf("publish: manifest %s has no reference", desc.Digest)
		}
		ref, err := name.NewTag(registry + "/" + rel)
		if err != nil {
			return nil, err
		}
		if desc.MediaType.IsIndex() {
			idx, err := top.ImageIndex(desc.Digest)
			if err != nil {
				return nil, err
			}
			err = remote.WriteIndex(ref, idx, opts...)
		} else {
			img, err2 := top.Image(desc.Digest)
			if err2 != nil {
				return nil, err2
			}
			err = remote.Write(ref, img, opts...)
		}
		if err != nil {
			return nil, fmt.Errorf("publish %s: %w", ref, err)
		}
		pushed = append(pushed, ref.String()+"@"+desc.Digest.String())
	}
	return pushed, nil
}
