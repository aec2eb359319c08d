package console

// SetQueueLimit changes how many operations of each state the queue shows.
func (c *Console) SetQueueLimit(n int) { c.queueLimit = n }
