package routing

import (
	"errors"
	"strconv"
	"strings"
)

// The fold's records (package controllers/fold moves a retired shard S's
// value v into its base key K as +v on K, the credit, and −v on S, the
// debit, each move numbered per shard). Each side of a move records it in
// its own slot, in the same script as the change it makes, so that a
// reader that reads a place together with its records (atomically: one
// script) knows which moves that place's value includes:
//
//   - K's side, the ledger (FoldLedgerKey, a hash): field LedgerSeq(S)
//     holds n, the number of the last move credited from S, and
//     LedgerLast(S) that move's record; field S holds it too while the
//     move is pending (credited, not yet known debited).
//   - S's side: FoldAckKey(S) holds n, the number of the last move
//     debited, and FoldDebitKey(S) "<applied> <record>" of that move
//     (applied "1" when the debit changed S, "0" when it found nothing to
//     debit: the value had expired or been removed with S).
//
// A record is "v n at" for a counter (at: the shard's expiry when read,
// -1 none), "h v n field" / "z v n member" for a hash's field or a sorted
// set's member, or "s 1 n member" for a set's member.

// FoldAckKey is the key in S's slot that holds the number of the last
// move debited from shard S.
func FoldAckKey(shard string) string { return SameSlotKey(shard, "foldack") }

// FoldDebitKey is the key in S's slot that holds the last debit's record.
func FoldDebitKey(shard string) string { return SameSlotKey(shard, "folddebit") }

// FoldSeqKey is the key in K's slot where the number of the last move
// credited from shard waits once its generation was retired (it leaves
// the ledger then, and expires after the shard's ack key).
func FoldSeqKey(key, shard string) string { return SameSlotKey(key, "foldseq:"+shard) }

// LedgerSeq is the ledger field of the number of the last move credited
// from shard.
func LedgerSeq(shard string) string { return "seq:" + shard }

// LedgerLast is the ledger field of the record of the last move credited
// from shard.
func LedgerLast(shard string) string { return "last:" + shard }

// FoldMove is one parsed fold record.
type FoldMove struct {
	// Kind is 'c' (a counter), 'h' (a hash's field), 'z' (a sorted
	// set's member: V is a score) or 's' (a set's member: V is 1).
	Kind byte
	// V is the amount moved as Redis printed it.
	V string
	// N is the move's number (per shard, from 1).
	N int64
	// Field is the field or member (empty for a counter).
	Field string
	// At is a counter shard's PEXPIRETIME when it was read (-1: none).
	At int64
}

var errFoldRecord = errors.New("malformed fold record")

// ParseFoldRecord parses a ledger record (see above).
func ParseFoldRecord(rec string) (FoldMove, error) {
	m := FoldMove{At: -1}
	if strings.HasPrefix(rec, "h ") || strings.HasPrefix(rec, "z ") || strings.HasPrefix(rec, "s ") {
		parts := strings.SplitN(rec, " ", 4)
		if len(parts) != 4 {
			return m, errFoldRecord
		}
		m.Kind, m.V, m.Field = parts[0][0], parts[1], parts[3]
		n, err := strconv.ParseInt(parts[2], 10, 64)
		if err != nil || n <= 0 {
			return m, errFoldRecord
		}
		m.N = n
		if m.Kind != 'z' {
			_, err = strconv.ParseInt(m.V, 10, 64)
		} else {
			_, err = strconv.ParseFloat(m.V, 64)
		}
		if err != nil {
			return m, errFoldRecord
		}
		return m, nil
	}
	f := strings.Fields(rec)
	if len(f) != 2 && len(f) != 3 {
		return m, errFoldRecord
	}
	m.Kind, m.V = 'c', f[0]
	var err, err2, err3 error
	_, err = strconv.ParseInt(f[0], 10, 64)
	m.N, err2 = strconv.ParseInt(f[1], 10, 64)
	if len(f) == 3 {
		m.At, err3 = strconv.ParseInt(f[2], 10, 64)
	}
	if err != nil || err2 != nil || err3 != nil || m.N <= 0 {
		return m, errFoldRecord
	}
	return m, nil
}

// FoldGap is how a reader's snapshot of K (with its ledger) and of a
// shard S (with its ack and debit record) disagree on one move of S.
type FoldGap struct {
	Move FoldMove
	// Credited: K's snapshot includes the move's credit, S's does not
	// include its debit, so v is in both: the reader counts it once by
	// taking v out of S's value (where both still hold the field).
	// Otherwise S's snapshot includes the debit and K's not the credit,
	// so v is in neither: the reader adds it to K's value.
	Credited bool
}

// ReconcileFold compares the moves of shard that K's side (the ledger and
// retired, the shard's FoldSeqKey, read with K; "" when missing) and S's
// side (ack and debit, read with S; "" when missing) include. Moves are
// numbered and applied in order, a move's credit before its debit, and the
// next move is credited only after the previous one's debit, so two
// snapshots taken at any two moments differ by some number of moves, in
// one direction. It returns the one move they differ by (nil when none),
// or ok false when they differ by more (the snapshots are too far apart in
// time) or a record is missing: the reader reads again.
func ReconcileFold(ledger map[string]string, retired, shard, ack, debit string) (gap *FoldGap, ok bool) {
	seq, inLedger := ledger[LedgerSeq(shard)]
	if !inLedger {
		// Retired: the number left the ledger for its own key.
		seq = retired
	}
	credited, _ := strconv.ParseInt(seq, 10, 64)
	debited, _ := strconv.ParseInt(ack, 10, 64)
	switch {
	case credited == debited:
		return nil, true
	case credited == debited+1:
		m, err := ParseFoldRecord(ledger[LedgerLast(shard)])
		if err != nil || m.N != credited {
			return nil, false
		}
		return &FoldGap{Move: m, Credited: true}, true
	case debited == credited+1:
		applied, rec, _ := strings.Cut(debit, " ")
		m, err := ParseFoldRecord(rec)
		if err != nil || m.N != debited {
			return nil, false
		}
		if applied != "1" {
			// The debit found nothing to take: v left S with the key,
			// not through K.
			return nil, true
		}
		return &FoldGap{Move: m}, true
	}
	return nil, false
}
