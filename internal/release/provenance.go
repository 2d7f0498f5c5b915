package release

import (
	"encoding/json"
	"sort"

	v1 "github.com/google/go-containerregistry/pkg/v1"
)

// SLSA provenance v1 in an in-toto Statement v1: written out here (a few
// structs) rather than importing the in-toto protobuf bindings, whose
// dependency tree is far larger than the JSON they describe.
const (
	StatementType       = "https://in-toto.io/Statement/v1"
	ProvenancePredicate = "https://slsa.dev/provenance/v1"
	// BuildType names how heatsink's releases are built: `make release`.
	BuildType = "https://github.com/heatsink-dev/heatsink/blob/main/docs/release.md#make-release"
)

// Subject is one artefact a statement is about.
type Subject struct {
	Name   string            `json:"name"`
	Digest map[string]string `json:"digest"`
}

// Statement is an in-toto statement with a SLSA v1 provenance predicate.
type Statement struct {
	Type          string     `json:"_type"`
	Subject       []Subject  `json:"subject"`
	PredicateType string     `json:"predicateType"`
	Predicate     Provenance `json:"predicate"`
}

// Provenance is SLSA v1's predicate.
type Provenance struct {
	BuildDefinition struct {
		BuildType            string               `json:"buildType"`
		ExternalParameters   map[string]string    `json:"externalParameters"`
		InternalParameters   map[string]string    `json:"internalParameters,omitempty"`
		ResolvedDependencies []ResourceDescriptor `json:"resolvedDependencies"`
	} `json:"buildDefinition"`
	RunDetails struct {
		Builder struct {
			ID string `json:"id"`
		} `json:"builder"`
	} `json:"runDetails"`
}

// ResourceDescriptor is an input of the build.
type ResourceDescriptor struct {
	URI    string            `json:"uri"`
	Digest map[string]string `json:"digest"`
}

// BuildInputs is what a release image was built from.
type BuildInputs struct {
	Version, Revision, Source, GoVersion, LDFlags string
	BaseDigest                                    v1.Hash
	// Builder identifies where it ran (a CI job's URL, or "make release").
	Builder string
}

// ProvenanceStatement says how the subjects (the image index and each
// platform manifest, by name) were built: which commit of which source, at
// which version, with which Go and flags, on which base.
func ProvenanceStatement(subjects map[string]v1.Hash, in BuildInputs) ([]byte, error) {
	st := Statement{Type: StatementType, PredicateType: ProvenancePredicate}
	for n, d := range subjects {
		st.Subject = append(st.Subject, Subject{Name: n, Digest: map[string]string{d.Algorithm: d.Hex}})
	}
	sort.Slice(st.Subject, func(i, j int) bool { return st.Subject[i].Name < st.Subject[j].Name })
	bd := &st.Predicate.BuildDefinition
	bd.BuildType = BuildType
	bd.ExternalParameters = map[string]string{"version": in.Version, "source": in.Source}
	bd.InternalParameters = map[string]string{"go": in.GoVersion, "ldflags": in.LDFlags, "CGO_ENABLED": "0"}
	bd.ResolvedDependencies = []ResourceDescriptor{
		{URI: "git+" + in.Source + "@" + in.Version, Digest: map[string]string{"gitCommit": in.Revision}},
		{URI: "heatsink-base (images/base)", Digest: map[string]string{in.BaseDigest.Algorithm: in.BaseDigest.Hex}},
	}
	st.Predicate.RunDetails.Builder.ID = in.Builder
	return json.MarshalIndent(st, "", "  ")
}
