package routing

import "testing"

func TestParseFoldRecord(t *testing.T) {
	for rec, want := range map[string]FoldMove{
		"5 3":              {Kind: 'c', V: "5", N: 3, At: -1},
		"-2 1 1700000000":  {Kind: 'c', V: "-2", N: 1, At: 1700000000},
		"h 7 2 a field":    {Kind: 'h', V: "7", N: 2, Field: "a field", At: -1},
		"z 1.5 4 player:1": {Kind: 'z', V: "1.5", N: 4, Field: "player:1", At: -1},
	} {
		if got, err := ParseFoldRecord(rec); err != nil || got != want {
			t.Errorf("ParseFoldRecord(%q) = %+v, %v; want %+v", rec, got, err, want)
		}
	}
	for _, rec := range []string{"", "5", "x 1", "5 0", "h 1.5 2 f", "z x 2 m", "h 1 2", "1 2 3 4"} {
		if _, err := ParseFoldRecord(rec); err == nil {
			t.Errorf("ParseFoldRecord(%q) accepted", rec)
		}
	}
}

// TestReconcileFold: which move a reader's snapshots of K and of a shard
// disagree on, from the records read with each.
func TestReconcileFold(t *testing.T) {
	const s = "S"
	ledger := func(seq, last string) map[string]string {
		m := map[string]string{}
		if seq != "" {
			m[LedgerSeq(s)] = seq
		}
		if last != "" {
			m[LedgerLast(s)] = last
		}
		return m
	}
	cases := []struct {
		name              string
		ledger            map[string]string
		retired           string
		ack, debit        string
		gap, ok, credited bool
		n                 int64
	}{
		{"never folded", ledger("", ""), "", "", "", false, true, false, 0},
		{"both sides at move 3", ledger("3", "h 1 3 f"), "", "3", "1 h 1 3 f", false, true, false, 0},
		{"K credited 4, S not debited", ledger("4", "h 2 4 g"), "", "3", "1 h 1 3 f", true, true, true, 4},
		{"S debited 4, K not credited", ledger("3", "h 1 3 f"), "", "4", "1 h 2 4 g", true, true, false, 4},
		{"S debited its first move, K not credited", ledger("", ""), "", "1", "1 7 1", true, true, false, 1},
		{"S debited nothing (gone)", ledger("3", "h 1 3 f"), "", "4", "0 h 2 4 g", false, true, false, 0},
		{"two moves apart", ledger("5", "h 2 5 g"), "", "3", "1 h 1 3 f", false, false, false, 0},
		{"two moves apart, S ahead", ledger("1", "7 1"), "", "3", "1 7 3", false, false, false, 0},
		{"last record of another move", ledger("4", "h 2 3 g"), "", "3", "", false, false, false, 0},
		{"retired at move 9", ledger("", ""), "9", "9", "1 5 9", false, true, false, 0},
		{"retired at 9, credited 10 since", ledger("10", "5 10"), "9", "9", "1 5 9", true, true, true, 10},
	}
	for _, c := range cases {
		gap, ok := ReconcileFold(c.ledger, c.retired, s, c.ack, c.debit)
		if ok != c.ok || (gap != nil) != c.gap {
			t.Errorf("%s: gap %+v, ok %v; want gap %v, ok %v", c.name, gap, ok, c.gap, c.ok)
			continue
		}
		if gap != nil && (gap.Credited != c.credited || gap.Move.N != c.n) {
			t.Errorf("%s: gap %+v; want credited %v, move %d", c.name, gap, c.credited, c.n)
		}
	}
}
