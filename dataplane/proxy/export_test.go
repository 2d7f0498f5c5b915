package proxy

// SetWaitEmulated makes WAIT take the path of Redis 7.2 and later (the
// proxy waits for the replicas' offsets itself) whatever the Redis.
func SetWaitEmulated(on bool) { waitEmulated.Store(on) }

// SharedDials is how many shared upstream connections (shared.go) the
// proxy set out to open, of both RESP versions.
func (p *Proxy) SharedDials() int64 { return p.pools[2].dials.Load() + p.pools[3].dials.Load() }
