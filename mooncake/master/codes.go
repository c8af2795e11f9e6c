package master

// Mooncake's error codes (its ErrorCode), as the master answers them in
// the code fields of masterpb's responses. 0 is success.
const (
	CodeOK                  = 0
	CodeInternalError       = -1
	CodeSegmentNotFound     = -101
	CodeSegmentExists       = -102 // SEGMENT_ALREADY_EXISTS
	CodeNoAvailableHandle   = -200 // no room for the object
	CodeInvalidKey          = -400
	CodeInvalidParams       = -600
	CodeIllegalClient       = -601 // the put is another client's
	CodeReplicaNotReady     = -703 // REPLICA_IS_NOT_READY: the object is being put
	CodeObjectNotFound      = -704
	CodeObjectAlreadyExists = -705
	CodeObjectHasLease      = -706
)

// Limits on what a call may carry.
const (
	// MaxKeyLen is the longest key, in bytes: a longer one is
	// CodeInvalidKey.
	MaxKeyLen = 4096
	// MaxReplicas is the most replicas a put may ask for.
	MaxReplicas = 16
	// MaxSegmentNameLen is the longest segment name, in bytes.
	MaxSegmentNameLen = 1024
	// MaxClientIDLen is the longest client ID, in bytes (Mooncake's are
	// 16).
	MaxClientIDLen = 64
	// MaxPatternLen is the longest RemoveByRegex pattern, in bytes.
	MaxPatternLen = 4096
)
