//go:build !cgo || !linux

package ibv

// QP is a queue pair; this build has none.
type QP struct{ _ [0]func() }

// CreateQP reports that this build cannot use verbs.
func (pd *PD) CreateQP(a QPInitAttr) (*QP, error) { return nil, errUnsupported("ibv_create_qp") }

// Num returns 0.
func (qp *QP) Num() uint32 { return 0 }

// Caps returns zero caps.
func (qp *QP) Caps() QPCaps { return QPCaps{} }

// State reports that this build cannot use verbs.
func (qp *QP) State() (QPState, error) { return QPSUnknown, errUnsupported("ibv_query_qp") }

// PathMTU reports that this build cannot use verbs.
func (qp *QP) PathMTU() (int, error) { return 0, errUnsupported("ibv_query_qp") }

// ToInit reports that this build cannot use verbs.
func (qp *QP) ToInit(port int, access Access) error { return errUnsupported("ibv_modify_qp") }

// ToRTR reports that this build cannot use verbs.
func (qp *QP) ToRTR(a RTRAttr) error { return errUnsupported("ibv_modify_qp") }

// ToRTS reports that this build cannot use verbs.
func (qp *QP) ToRTS(a RTSAttr) error { return errUnsupported("ibv_modify_qp") }

// ToError reports that this build cannot use verbs.
func (qp *QP) ToError() error { return errUnsupported("ibv_modify_qp") }

// PostSend reports that this build cannot use verbs.
func (qp *QP) PostSend(wrs []SendWR) (int, error) { return 0, errUnsupported("ibv_post_send") }

// PostRecv reports that this build cannot use verbs.
func (qp *QP) PostRecv(wrs []RecvWR) (int, error) { return 0, errUnsupported("ibv_post_recv") }

// Close does nothing.
func (qp *QP) Close() error { return nil }

// ModifyFromCM reports that this build cannot use verbs.
func (qp *QP) ModifyFromCM(to string, state QPState, kern []byte, maskOff uint32, destRd, rd int) error {
	return errUnsupported("ibv_modify_qp")
}

// Context returns nil.
func (qp *QP) Context() *Context { return nil }

// HasSRQ returns false.
func (qp *QP) HasSRQ() bool { return false }
