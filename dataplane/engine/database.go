package engine

import (
	"context"

	"github.com/redis/go-redis/v9"

	"github.com/heatsink-dev/heatsink/routing"
)

// Databases. A routing table governs one logical database (Table.Database,
// the policy's spec.target.database). The engine's own commands (cache
// fills, replica writes, shard increments, flushes) must reach that
// database whatever the database of the client it was given: the sidecar
// hands it a client of database 0 and learns the database from the table.
// So the engine keeps one client per database it has been asked for: the
// given client for its own database, and a copy of its options with DB
// set for any other (a *redis.Client only: a Redis Cluster has database 0
// alone, and another UniversalClient cannot be copied). A table whose
// database the engine cannot reach is applied as if it were empty: every
// command goes raw, which is always exact.

// clientDB is the database the client given to New sends to: its
// Options().DB for a *redis.Client or *redis.Ring, 0 for a cluster (the
// only database it has) and for any other UniversalClient, which the
// engine cannot inspect.
func clientDB(c redis.UniversalClient) int32 {
	switch c := c.(type) {
	case *redis.Client:
		return int32(c.Options().DB)
	case *redis.Ring:
		return int32(c.Options().DB)
	}
	return 0
}

// clientFor returns the client of database db, or nil when the engine
// cannot reach it.
func (e *Engine) clientFor(db int32) redis.UniversalClient {
	if db == e.clientDB {
		return e.client
	}
	c, ok := e.client.(*redis.Client)
	if !ok {
		return nil
	}
	e.dbMu.Lock()
	defer e.dbMu.Unlock()
	if d := e.dbClients[db]; d != nil {
		return d
	}
	if e.closed.Load() {
		return nil
	}
	// NewClient clones the options; only DB differs. The hooks of the
	// given client are not copied, so the go-redis hook never sees the
	// engine's own commands on it (nor would it intercept them: they
	// carry the bypass mark).
	o := *c.Options()
	o.DB = int(db)
	d := redis.NewClient(&o)
	if e.dbClients == nil {
		e.dbClients = map[int32]*redis.Client{}
	}
	e.dbClients[db] = d
	return d
}

// closeDBClients closes the clients clientFor opened (not the one given to
// New, which belongs to the caller).
func (e *Engine) closeDBClients() {
	e.dbMu.Lock()
	defer e.dbMu.Unlock()
	for db, c := range e.dbClients {
		_ = c.Close()
		delete(e.dbClients, db)
	}
}

// rc is the client of the current table's database (never nil: a table
// whose database the engine cannot reach has no plans, and then only the
// exported Get/Set/... on unlisted keys use it, in the given client's
// database).
func (e *Engine) rc() redis.UniversalClient {
	if c := e.table.Load().client; c != nil {
		return c
	}
	return e.client
}

// Database is the logical database of the current table: the proxy hands
// the engine only commands sent in it.
func (e *Engine) Database() int32 { return e.table.Load().table.Database }

// ClientDB is the database of the client given to New. The go-redis hook,
// which intercepts that client's commands, applies the table only when it
// equals Database.
func (e *Engine) ClientDB() int32 { return e.clientDB }

// switchDatabase runs when a table names another database than the
// previous one (a policy's database cannot change, so this is a policy
// deleted and created again under the same name): what the engine holds
// came from the old database and must not answer for the new one. Pending
// pre-aggregated increments are written to the old database first.
func (e *Engine) switchDatabase(old *index) {
	ctx, cancel := context.WithTimeout(context.Background(), e.opts.UpstreamTimeout)
	defer cancel()
	_ = e.Flush(ctx) // still through old's client: the new index is not stored yet
	for k := range old.plans {
		e.forgetFlights(k)
	}
	e.cache.invalidateAll()
	// Totals were read in the old database. The counters stay (a writer
	// may hold one), their totals are read again.
	e.countersMu.Lock()
	for _, c := range e.counters {
		c.mu.Lock()
		c.known = false
		c.mu.Unlock()
	}
	e.countersMu.Unlock()
}

// newIndex starts an index of t with the client of its database; nil when
// the engine cannot reach it, and then the index has no plans.
func (e *Engine) newIndex(t *routing.Table) *index {
	return &index{table: t, plans: make(map[string]*plan, len(t.Entries)), client: e.clientFor(t.Database)}
}
