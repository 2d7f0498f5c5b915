package proxy

// SetWaitEmulated makes WAIT take the path of Redis 7.2 and later (the
// proxy waits for the replicas' offsets itself) whatever the Redis.
func SetWaitEmulated(on bool) { waitEmulated.Store(on) }
