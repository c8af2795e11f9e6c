/*
 * shim.h: the C side of package ibv (implemented in shim_linux.c).
 *
 * libibverbs.so.1 and librdmacm.so.1 are opened with dlopen at run time and
 * their versioned symbols bound with dlvsym into the tables below; nothing is
 * linked at build time. The Go code calls the small wrappers declared here,
 * never the tables directly, because cgo cannot call C function pointers.
 *
 * The data path (xibv_post_send, xibv_post_recv, xibv_post_srq_recv,
 * xibv_poll_cq, xibv_req_notify_cq) calls the provider's entry points in
 * ctx->ops, as the static inline functions of <infiniband/verbs.h> do, and
 * translates whole batches per call between the package's Go structs and
 * the verbs structs held in C memory. They take the verbs objects and the
 * ring as uintptr_t handles: a C pointer argument whose struct holds
 * pointers makes cgo check on every call whether it points into Go memory
 * (cgoCheckPointer), which these never do; a handle is not checked. The
 * arrays of Go structs they read and write hold no pointers, so cgo does
 * not check those either.
 */
#ifndef XFER_IBV_SHIM_H
#define XFER_IBV_SHIM_H

#include "ibv_abi.h"

/* ---- the run-time bound libraries ---- */

struct xibv_verbs_fns {
	struct ibv_device **(*get_device_list)(int *num_devices);
	void (*free_device_list)(struct ibv_device **list);
	struct ibv_context *(*open_device)(struct ibv_device *device);
	int (*close_device)(struct ibv_context *context);
	int (*query_device)(struct ibv_context *context, struct ibv_device_attr *attr);
	int (*query_port)(struct ibv_context *context, uint8_t port, struct ibv_port_attr *attr);
	int (*query_gid)(struct ibv_context *context, uint8_t port, int index, union ibv_gid *gid);
	struct ibv_pd *(*alloc_pd)(struct ibv_context *context);
	int (*dealloc_pd)(struct ibv_pd *pd);
	struct ibv_mr *(*reg_mr)(struct ibv_pd *pd, void *addr, size_t length, int access);
	int (*dereg_mr)(struct ibv_mr *mr);
	struct ibv_comp_channel *(*create_comp_channel)(struct ibv_context *context);
	int (*destroy_comp_channel)(struct ibv_comp_channel *channel);
	struct ibv_cq *(*create_cq)(struct ibv_context *context, int cqe, void *cq_context,
				    struct ibv_comp_channel *channel, int comp_vector);
	int (*destroy_cq)(struct ibv_cq *cq);
	int (*get_cq_event)(struct ibv_comp_channel *channel, struct ibv_cq **cq, void **cq_context);
	void (*ack_cq_events)(struct ibv_cq *cq, unsigned int nevents);
	struct ibv_srq *(*create_srq)(struct ibv_pd *pd, struct ibv_srq_init_attr *attr);
	int (*destroy_srq)(struct ibv_srq *srq);
	struct ibv_qp *(*create_qp)(struct ibv_pd *pd, struct ibv_qp_init_attr *attr);
	int (*modify_qp)(struct ibv_qp *qp, struct ibv_qp_attr *attr, int mask);
	int (*query_qp)(struct ibv_qp *qp, struct ibv_qp_attr *attr, int mask,
			struct ibv_qp_init_attr *init_attr);
	int (*destroy_qp)(struct ibv_qp *qp);
	/* src is a struct ib_uverbs_qp_attr, as the kernel's rdma_cm writes it */
	void (*copy_qp_attr_from_kern)(struct ibv_qp_attr *dst, const void *src);
};

extern struct xibv_verbs_fns xibv;

/*
 * Open lib (for example "libibverbs.so.1") and bind every symbol of the table
 * t. On failure return -1, leave t untouched and write why to err. The
 * library handle is kept open on success and closed on failure.
 */
int xibv_load_verbs(const char *lib, struct xibv_verbs_fns *t, char *err, size_t errlen);

/* ---- mirrors of the package's Go structs (layouts asserted in layout_cgo.go) ---- */

struct xfer_sge {
	uint64_t addr;
	uint32_t len;
	uint32_t lkey;
};

struct xfer_send_wr { /* SendWR */
	uint64_t id;
	intptr_t op;    /* Opcode: the IBV_WR_* value */
	intptr_t flags; /* SendFlags: IBV_SEND_* bits */
	struct xfer_sge sge;
	uint64_t remote_addr;
	uint32_t rkey;
	uint32_t imm; /* host order */
};

struct xfer_recv_wr { /* RecvWR */
	uint64_t id;
	struct xfer_sge sge;
};

struct xfer_wc { /* WC */
	uint64_t id;
	intptr_t status; /* WCStatus: the IBV_WC_* status */
	intptr_t opcode; /* WCOpcode: the IBV_WC_* opcode */
	uint32_t vendor_err;
	uint32_t byte_len;
	uint32_t imm; /* host order */
	uint8_t has_imm;
	uint32_t qp_num;
	uint32_t src_qp;
};

/* ---- per QP / SRQ / CQ buffers in C memory ---- */

/*
 * A ring of preallocated work requests: scap send WRs with one SGE each and
 * rcap receive WRs with one SGE each. Every post writes posted, the number
 * of WRs from the start of the caller's batch that the provider accepted,
 * and, when it fails, bad: the index of the WR that was refused.
 */
struct xibv_ring {
	int scap;
	int rcap;
	int posted;
	int bad;
	struct ibv_send_wr *swr;
	struct ibv_sge *ssge;
	struct ibv_recv_wr *rwr;
	struct ibv_sge *rsge;
};

struct xibv_ring *xibv_ring_new(int scap, int rcap);
void xibv_ring_free(struct xibv_ring *r);

/* The data path. Each returns 0 or a positive errno; r->posted tells how many WRs were posted. */
int xibv_post_send(uintptr_t qp, uintptr_t r, const struct xfer_send_wr *wrs, int n);
int xibv_post_recv(uintptr_t qp, uintptr_t r, const struct xfer_recv_wr *wrs, int n);
int xibv_post_srq_recv(uintptr_t srq, uintptr_t r, const struct xfer_recv_wr *wrs, int n);
/* Polls up to n (<= the size of buf) completions into buf and translates them to out. */
int xibv_poll_cq(uintptr_t cq, uintptr_t buf, int n, struct xfer_wc *out);
int xibv_req_notify_cq(uintptr_t cq, int solicited_only);

/* ---- control path wrappers over the bound functions ---- */

struct ibv_device **xibv_get_device_list(int *n);
void xibv_free_device_list(struct ibv_device **list);
struct ibv_context *xibv_open_device(struct ibv_device *dev);
int xibv_close_device(struct ibv_context *ctx);
int xibv_query_device(struct ibv_context *ctx, struct ibv_device_attr *attr);
int xibv_query_port(struct ibv_context *ctx, int port, struct ibv_port_attr *attr);
int xibv_query_gid(struct ibv_context *ctx, int port, int index, union ibv_gid *gid);
struct ibv_pd *xibv_alloc_pd(struct ibv_context *ctx);
int xibv_dealloc_pd(struct ibv_pd *pd);
struct ibv_mr *xibv_reg_mr(struct ibv_pd *pd, uintptr_t addr, size_t length, int access);
/* ibv_reg_dmabuf_mr; NULL with errno ENOSYS when the library has none. */
struct ibv_mr *xibv_reg_dmabuf_mr(struct ibv_pd *pd, uint64_t offset, size_t length, uint64_t iova,
				  int fd, int access);
int xibv_dereg_mr(struct ibv_mr *mr);
struct ibv_comp_channel *xibv_create_comp_channel(struct ibv_context *ctx);
int xibv_destroy_comp_channel(struct ibv_comp_channel *ch);
struct ibv_cq *xibv_create_cq(struct ibv_context *ctx, int cqe, struct ibv_comp_channel *ch);
int xibv_destroy_cq(struct ibv_cq *cq);
/* Takes one event: 0 and *cq set, or -1 with errno (EAGAIN when none is pending). */
int xibv_get_cq_event(struct ibv_comp_channel *ch, struct ibv_cq **cq);
void xibv_ack_cq_events(struct ibv_cq *cq, unsigned int n);
struct ibv_srq *xibv_create_srq(struct ibv_pd *pd, struct ibv_srq_init_attr *attr);
int xibv_destroy_srq(struct ibv_srq *srq);
struct ibv_qp *xibv_create_qp(struct ibv_pd *pd, struct ibv_qp_init_attr *attr);
int xibv_modify_qp(struct ibv_qp *qp, struct ibv_qp_attr *attr, int mask);
int xibv_query_qp_state(struct ibv_qp *qp, int *state);
int xibv_query_qp_mtu(struct ibv_qp *qp, int *mtu);
int xibv_destroy_qp(struct ibv_qp *qp);

/*
 * Memory windows (type 2). ibv_alloc_mw and ibv_dealloc_mw are static
 * inline wrappers over ctx->ops, so these call the provider as they do:
 * alloc returns NULL with errno EOPNOTSUPP where the provider has none.
 * xibv_post_bind_mw posts one IBV_WR_BIND_MW of [addr, +length) of mr to
 * mw with the rkey rkey (the window's with its low byte advanced,
 * ibv_inc_rkey); xibv_post_local_inv posts one IBV_WR_LOCAL_INV of rkey.
 * Both return 0 or a positive errno.
 */
struct ibv_mw *xibv_alloc_mw(struct ibv_pd *pd);
int xibv_dealloc_mw(struct ibv_mw *mw);
int xibv_post_bind_mw(struct ibv_qp *qp, uint64_t id, unsigned int flags, struct ibv_mw *mw,
		      uint32_t rkey, struct ibv_mr *mr, uint64_t addr, uint64_t length,
		      unsigned int access);
int xibv_post_local_inv(struct ibv_qp *qp, uint64_t id, unsigned int flags, uint32_t rkey);

/*
 * Move qp to state with the attributes the kernel's rdma_cm computed for it
 * (RDMA_USER_CM_CMD_INIT_QP_ATTR): kern is a struct ib_uverbs_qp_attr, whose
 * first field is the attribute mask. mask_off clears bits of the mask;
 * dest_rd and rd, when >= 0, override max_dest_rd_atomic and max_rd_atomic.
 */
int xibv_modify_qp_kern(struct ibv_qp *qp, int state, const void *kern, unsigned int mask_off,
			int dest_rd, int rd);
/* The kernel's index of the device called name (ibv_get_device_index), or -1. */
int xibv_device_index(const char *name);

/* ---- the ABI table (abi_table.h expanded against ibv_abi.h) ---- */

struct xibv_abi_item {
	const char *expr; /* as written for the system headers */
	long long value;  /* its value with ibv_abi.h */
};

/* The table and its length. */
const struct xibv_abi_item *xibv_abi_table(int *n);

#endif /* XFER_IBV_SHIM_H */
