package console

// SetQueueLimit changes how many operations of each state the queue shows.
func (c *Console) SetQueueLimit(n int) { c.queueLimit = n }

// LabDir is the directory of the lab's scratch ledger, "" until the lab
// is first used and after Close.
func (c *Console) LabDir() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.labDir
}

// SetPageSize changes how many operations a page of the operations list
// shows.
func (c *Console) SetPageSize(n int) { c.pageSize = n }

// SetWorkflowsPageSize changes how many workflows a page of the workflows
// list shows.
func (c *Console) SetWorkflowsPageSize(n int) { c.workflowsPageSize = n }
