package release

import (
	"bytes"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/static"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"github.com/secure-systems-lab/go-securesystemslib/dsse"
	"github.com/sigstore/sigstore/pkg/cryptoutils"
	"github.com/sigstore/sigstore/pkg/signature"
	sigdsse "github.com/sigstore/sigstore/pkg/signature/dsse"
	"github.com/sigstore/sigstore/pkg/signature/payload"
)

// What cosign writes and reads (its "simple signing" and attestation
// formats): the signature of a manifest is a manifest tagged
// sha256-<hex>.sig whose layer is the payload and whose layer annotation
// holds the base64 signature; attestations are DSSE envelopes in a
// manifest tagged sha256-<hex>.att; an SBOM attached with `cosign attach
// sbom` is tagged sha256-<hex>.sbom.
const (
	SignatureAnnotation  = "dev.cosignproject.cosign/signature"
	SimpleSigningType    = "application/vnd.dev.cosign.simplesigning.v1+json"
	DSSEMediaType        = "application/vnd.dsse.envelope.v1+json"
	InTotoPayloadType    = "application/vnd.in-toto+json"
	predicateAnnotation  = "predicateType"
	SignatureTagSuffix   = ".sig"
	AttestationTagSuffix = ".att"
	SBOMTagSuffix        = ".sbom"
)

// AttachedTag is the tag cosign gives what it attaches to digest d.
func AttachedTag(d v1.Hash, suffix string) string {
	return d.Algorithm + "-" + d.Hex + suffix
}

// Signer signs a release with an ECDSA P-256 key (cosign's default kind).
type Signer struct {
	sv     signature.SignerVerifier
	pubPEM []byte
}

// LoadSigner reads an unencrypted PEM private key (PKCS#8 or SEC 1, as
// `openssl ecparam -genkey -name prime256v1` writes; `cosign
// import-key-pair` takes the same file).
func LoadSigner(pemBytes []byte) (*Signer, error) {
	k, err := cryptoutils.UnmarshalPEMToPrivateKey(pemBytes, cryptoutils.SkipPassword)
	if err != nil {
		return nil, fmt.Errorf("signing key: %w", err)
	}
	ec, ok := k.(*ecdsa.PrivateKey)
	if !ok || ec.Curve != elliptic.P256() {
		return nil, fmt.Errorf("signing key: want ECDSA P-256, got %T", k)
	}
	sv, err := signature.LoadECDSASignerVerifier(ec, crypto.SHA256)
	if err != nil {
		return nil, err
	}
	pub, err := cryptoutils.MarshalPublicKeyToPEM(ec.Public())
	if err != nil {
		return nil, err
	}
	return &Signer{sv: sv, pubPEM: pub}, nil
}

// PublicKeyPEM is the key to verify with (`cosign verify --key`).
func (s *Signer) PublicKeyPEM() []byte { return s.pubPEM }

// SignatureImage is the cosign signature manifest of the manifest digest
// of repo: the simple-signing payload naming repo and digest, signed.
func (s *Signer) SignatureImage(repo name.Repository, digest v1.Hash) (v1.Image, error) {
	p, err := json.Marshal(payload.Cosign{Image: repo.Digest(digest.String())})
	if err != nil {
		return nil, err
	}
	sig, err := s.sv.SignMessage(bytes.NewReader(p))
	if err != nil {
		return nil, err
	}
	return artifact(p, SimpleSigningType, map[string]string{SignatureAnnotation: base64.StdEncoding.EncodeToString(sig)})
}

// AttestationImage is the cosign attestation manifest of an in-toto
// statement: a DSSE envelope signed with the key.
func (s *Signer) AttestationImage(statement []byte, predicateType string) (v1.Image, error) {
	env, err := sigdsse.WrapSigner(s.sv, InTotoPayloadType).SignMessage(bytes.NewReader(statement))
	if err != nil {
		return nil, err
	}
	return artifact(env, DSSEMediaType, map[string]string{SignatureAnnotation: "", predicateAnnotation: predicateType})
}

// artifact is a one-layer OCI manifest of b, as cosign writes its
// signatures and attachments.
func artifact(b []byte, mt types.MediaType, annotations map[string]string) (v1.Image, error) {
	base := mutate.ConfigMediaType(mutate.MediaType(empty.Image, types.OCIManifestSchema1), types.OCIConfigJSON)
	return mutate.Append(base, mutate.Addendum{Layer: static.NewLayer(b, mt), Annotations: annotations})
}

// Verifier checks signatures and attestations with a public key.
type Verifier struct{ v signature.Verifier }

// LoadVerifier reads a PEM public key (cosign.pub).
func LoadVerifier(pubPEM []byte) (*Verifier, error) {
	k, err := cryptoutils.UnmarshalPEMToPublicKey(pubPEM)
	if err != nil {
		return nil, err
	}
	v, err := signature.LoadVerifier(k, crypto.SHA256)
	if err != nil {
		return nil, err
	}
	return &Verifier{v: v}, nil
}

// VerifySignature checks a signature manifest as `cosign verify --key`
// does: some layer's annotation is a valid signature of its payload, and
// the payload names digest (and repository repo).
func (v *Verifier) VerifySignature(sig v1.Image, repo string, digest v1.Hash) error {
	m, err := sig.Manifest()
	if err != nil {
		return err
	}
	var why []string
	for _, l := range m.Layers {
		b64, ok := l.Annotations[SignatureAnnotation]
		if !ok || l.MediaType != SimpleSigningType {
			continue
		}
		raw, err := base64.StdEncoding.DecodeString(b64)
		if err != nil {
			why = append(why, err.Error())
			continue
		}
		p, err := blob(sig, l.Digest)
		if err != nil {
			return err
		}
		if err := v.v.VerifySignature(bytes.NewReader(raw), bytes.NewReader(p)); err != nil {
			why = append(why, err.Error())
			continue
		}
		var sc payload.SimpleContainerImage
		if err := json.Unmarshal(p, &sc); err != nil {
			why = append(why, err.Error())
			continue
		}
		if sc.Critical.Image.DockerManifestDigest != digest.String() || sc.Critical.Type != payload.CosignSignatureType {
			why = append(why, fmt.Sprintf("the payload signs %s (%q), not %s", sc.Critical.Image.DockerManifestDigest, sc.Critical.Type, digest))
			continue
		}
		if sc.Critical.Identity.DockerReference != repo {
			why = append(why, fmt.Sprintf("the payload names %s, not %s", sc.Critical.Identity.DockerReference, repo))
			continue
		}
		return nil
	}
	return fmt.Errorf("no valid signature of %s: %s", digest, strings.Join(why, "; "))
}

// VerifyAttestation checks an attestation manifest and returns its
// in-toto statement.
func (v *Verifier) VerifyAttestation(att v1.Image) ([]byte, error) {
	m, err := att.Manifest()
	if err != nil {
		return nil, err
	}
	for _, l := range m.Layers {
		if l.MediaType != DSSEMediaType {
			continue
		}
		env, err := blob(att, l.Digest)
		if err != nil {
			return nil, err
		}
		if err := sigdsse.WrapVerifier(v.v).VerifySignature(bytes.NewReader(env), nil); err != nil {
			return nil, err
		}
		var e dsse.Envelope
		if err := json.Unmarshal(env, &e); err != nil {
			return nil, err
		}
		return e.DecodeB64Payload()
	}
	return nil, fmt.Errorf("no DSSE envelope in the attestation")
}

func blob(img v1.Image, d v1.Hash) ([]byte, error) {
	l, err := img.LayerByDigest(d)
	if err != nil {
		return nil, err
	}
	rc, err := l.Uncompressed()
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	var b bytes.Buffer
	_, err = b.ReadFrom(rc)
	return b.Bytes(), err
}
