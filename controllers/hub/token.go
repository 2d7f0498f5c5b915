package hub

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// TokenKey is the key of the fleet token in its Secret.
const TokenKey = "token"

// EnsureToken returns the fleet token kept in Secret key, creating the
// Secret with a random token if it does not exist. Manager replicas that
// race agree on one (create is atomic; the loser reads the winner's). Node
// agents mount the same Secret, so the token never passes through anything
// but the API server and the kubelet.
func EnsureToken(ctx context.Context, c client.Client, key types.NamespacedName) (string, error) {
	for range 3 {
		var s corev1.Secret
		err := c.Get(ctx, key, &s)
		if err == nil {
			if t := string(s.Data[TokenKey]); t != "" {
				return t, nil
			}
			return "", fmt.Errorf("secret %s has no %q key", key, TokenKey)
		}
		if !apierrors.IsNotFound(err) {
			return "", fmt.Errorf("fleet token: %w", err)
		}
		var b [32]byte
		if _, err := rand.Read(b[:]); err != nil {
			return "", err
		}
		s = corev1.Secret{Data: map[string][]byte{TokenKey: []byte(hex.EncodeToString(b[:]))}}
		s.Namespace, s.Name = key.Namespace, key.Name
		s.Labels = map[string]string{"app.kubernetes.io/managed-by": "heatsink"}
		if err := c.Create(ctx, &s); err == nil {
			return string(s.Data[TokenKey]), nil
		} else if !apierrors.IsAlreadyExists(err) {
			return "", fmt.Errorf("fleet token: %w", err)
		}
	}
	return "", fmt.Errorf("fleet token: secret %s keeps changing", key)
}
