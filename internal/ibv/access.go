package ibv

// Access is a set of memory and QP access rights (enum ibv_access_flags).
type Access int

// Access rights. The values are those of IBV_ACCESS_*.
const (
	AccessLocalWrite   Access = 1
	AccessRemoteWrite  Access = 1 << 1
	AccessRemoteRead   Access = 1 << 2
	AccessRemoteAtomic Access = 1 << 3
	// AccessMWBind lets memory windows be bound over an MR.
	AccessMWBind Access = 1 << 4
)
