//go:build cgo

/*
 * shim_linux.c: run-time binding of libibverbs, and the batch
 * translation of the data path. See shim.h.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <dlfcn.h>
#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "shim.h"

struct xibv_verbs_fns xibv;

struct sym {
	const char *name;
	const char *version;
	size_t offset; /* of the function pointer in the table */
};

static void *bind_sym(void *h, const struct sym *s)
{
#ifdef __GLIBC__
	void *p = dlvsym(h, s->name, s->version);
	if (p)
		return p;
#endif
	/* No dlvsym (musl), or a library built without symbol versions. */
	return dlsym(h, s->name);
}

static int load(const char *lib, const struct sym *syms, size_t nsyms, void *table,
		size_t table_size, char *err, size_t errlen)
{
	void *h = dlopen(lib, RTLD_NOW | RTLD_LOCAL);
	if (!h) {
		const char *e = dlerror();
		snprintf(err, errlen, "dlopen %s: %s", lib, e ? e : "unknown error");
		return -1;
	}
	char *tmp = calloc(1, table_size);
	if (!tmp) {
		snprintf(err, errlen, "out of memory");
		dlclose(h);
		return -1;
	}
	for (size_t i = 0; i < nsyms; i++) {
		void *p = bind_sym(h, &syms[i]);
		if (!p) {
			snprintf(err, errlen, "%s has no symbol %s@%s", lib, syms[i].name,
				 syms[i].version);
			free(tmp);
			dlclose(h);
			return -1;
		}
		memcpy(tmp + syms[i].offset, &p, sizeof(p));
	}
	memcpy(table, tmp, table_size);
	free(tmp);
	return 0;
}

#define V(fn, ver) { "ibv_" #fn, ver, offsetof(struct xibv_verbs_fns, fn) }
static const struct sym verbs_syms[] = {
	V(get_device_list, "IBVERBS_1.1"),
	V(free_device_list, "IBVERBS_1.1"),
	V(open_device, "IBVERBS_1.1"),
	V(close_device, "IBVERBS_1.1"),
	V(query_device, "IBVERBS_1.1"),
	V(query_port, "IBVERBS_1.1"),
	V(query_gid, "IBVERBS_1.1"),
	V(alloc_pd, "IBVERBS_1.1"),
	V(dealloc_pd, "IBVERBS_1.1"),
	V(reg_mr, "IBVERBS_1.1"),
	V(dereg_mr, "IBVERBS_1.1"),
	V(create_comp_channel, "IBVERBS_1.0"),
	V(destroy_comp_channel, "IBVERBS_1.0"),
	V(create_cq, "IBVERBS_1.1"),
	V(destroy_cq, "IBVERBS_1.1"),
	V(get_cq_event, "IBVERBS_1.1"),
	V(ack_cq_events, "IBVERBS_1.1"),
	V(create_srq, "IBVERBS_1.1"),
	V(destroy_srq, "IBVERBS_1.1"),
	V(create_qp, "IBVERBS_1.1"),
	V(modify_qp, "IBVERBS_1.1"),
	V(query_qp, "IBVERBS_1.1"),
	V(destroy_qp, "IBVERBS_1.1"),
	V(copy_qp_attr_from_kern, "IBVERBS_1.0"),
};
#undef V


/* Optional: ibv_get_device_index appeared in rdma-core 27; NULL before. */
static int (*get_device_index)(struct ibv_device *device);
/* Optional: ibv_reg_dmabuf_mr appeared in rdma-core 34 (IBVERBS_1.12). */
static struct ibv_mr *(*reg_dmabuf_mr)(struct ibv_pd *pd, uint64_t offset, size_t length,
				       uint64_t iova, int fd, int access);

int xibv_load_verbs(const char *lib, struct xibv_verbs_fns *t, char *err, size_t errlen)
{
	int rc = load(lib, verbs_syms, sizeof(verbs_syms) / sizeof(verbs_syms[0]), t, sizeof(*t),
		      err, errlen);
	if (rc == 0 && t == &xibv) {
		void *h = dlopen(lib, RTLD_NOW | RTLD_LOCAL | RTLD_NOLOAD);
		if (h) {
			const struct sym s = { "ibv_get_device_index", "IBVERBS_1.9", 0 };
			get_device_index = (int (*)(struct ibv_device *))bind_sym(h, &s);
			const struct sym d = { "ibv_reg_dmabuf_mr", "IBVERBS_1.12", 0 };
			reg_dmabuf_mr = (struct ibv_mr * (*)(struct ibv_pd *, uint64_t, size_t, uint64_t,
							     int, int))bind_sym(h, &d);
		}
	}
	return rc;
}


/* ---- rings ---- */

struct xibv_ring *xibv_ring_new(int scap, int rcap)
{
	struct xibv_ring *r = calloc(1, sizeof(*r));
	if (!r)
		return NULL;
	r->scap = scap;
	r->rcap = rcap;
	if (scap > 0) {
		r->swr = calloc((size_t)scap, sizeof(*r->swr));
		r->ssge = calloc((size_t)scap, sizeof(*r->ssge));
		if (!r->swr || !r->ssge)
			goto fail;
		for (int i = 0; i < scap; i++)
			r->swr[i].sg_list = &r->ssge[i];
	}
	if (rcap > 0) {
		r->rwr = calloc((size_t)rcap, sizeof(*r->rwr));
		r->rsge = calloc((size_t)rcap, sizeof(*r->rsge));
		if (!r->rwr || !r->rsge)
			goto fail;
		for (int i = 0; i < rcap; i++)
			r->rwr[i].sg_list = &r->rsge[i];
	}
	return r;
fail:
	xibv_ring_free(r);
	errno = ENOMEM;
	return NULL;
}

void xibv_ring_free(struct xibv_ring *r)
{
	if (!r)
		return;
	free(r->swr);
	free(r->ssge);
	free(r->rwr);
	free(r->rsge);
	free(r);
}

/* ---- data path ---- */

static int norm(int rc)
{
	/* Providers return a positive errno, some a negative one. */
	return rc < 0 ? -rc : rc;
}

/*
 * refused records a chain of k work requests, the first done of the batch
 * posted before it, that the provider refused at its element idx (where
 * it named none, or one out of the chain: its first). The elements before
 * idx are posted, idx is the bad one. It returns the provider's errno.
 */
static int refused(struct xibv_ring *r, int done, int k, ptrdiff_t idx, int rc)
{
	if (idx < 0 || idx > k)
		idx = 0;
	r->posted = done + (int)idx;
	r->bad = done + (int)idx;
	return norm(rc);
}

int xibv_post_send(uintptr_t qph, uintptr_t rh, const struct xfer_send_wr *wrs, int n)
{
	struct ibv_qp *qp = (struct ibv_qp *)qph;
	struct xibv_ring *r = (struct xibv_ring *)rh;
	r->posted = 0;
	r->bad = -1;
	for (int i = 0; i < n; i++) {
		if (wrs[i].op < IBV_WR_RDMA_WRITE || wrs[i].op > IBV_WR_RDMA_READ ||
		    (wrs[i].flags & ~(intptr_t)(IBV_SEND_FENCE | IBV_SEND_SIGNALED |
						 IBV_SEND_SOLICITED | IBV_SEND_INLINE))) {
			r->bad = i; /* nothing is posted */
			return EINVAL;
		}
	}
	int done = 0;
	while (done < n) {
		int k = n - done;
		if (k > r->scap)
			k = r->scap;
		for (int i = 0; i < k; i++) {
			const struct xfer_send_wr *s = &wrs[done + i];
			struct ibv_send_wr *w = &r->swr[i];
			w->wr_id = s->id;
			w->next = i + 1 < k ? &r->swr[i + 1] : NULL;
			w->sg_list->addr = s->sge.addr;
			w->sg_list->length = s->sge.len;
			w->sg_list->lkey = s->sge.lkey;
			w->num_sge = s->sge.len ? 1 : 0;
			w->opcode = (enum ibv_wr_opcode)s->op;
			w->send_flags = (unsigned int)s->flags;
			w->imm_data = htonl(s->imm);
			w->wr.rdma.remote_addr = s->remote_addr;
			w->wr.rdma.rkey = s->rkey;
		}
		struct ibv_send_wr *bad = NULL;
		int rc = qp->context->ops.post_send(qp, r->swr, &bad);
		if (rc)
			return refused(r, done, k, bad ? bad - r->swr : 0, rc);
		done += k;
	}
	r->posted = n;
	return 0;
}

static int fill_recv(struct xibv_ring *r, const struct xfer_recv_wr *wrs, int k)
{
	for (int i = 0; i < k; i++) {
		struct ibv_recv_wr *w = &r->rwr[i];
		w->wr_id = wrs[i].id;
		w->next = i + 1 < k ? &r->rwr[i + 1] : NULL;
		w->sg_list->addr = wrs[i].sge.addr;
		w->sg_list->length = wrs[i].sge.len;
		w->sg_list->lkey = wrs[i].sge.lkey;
		w->num_sge = wrs[i].sge.len ? 1 : 0;
	}
	return k;
}

/*
 * post_recv posts wrs to the receive queue of qp, or to srq where qp is
 * NULL, in chains of at most r->rcap.
 */
static int post_recv(struct ibv_qp *qp, struct ibv_srq *srq, struct xibv_ring *r,
		     const struct xfer_recv_wr *wrs, int n)
{
	int done = 0;
	r->posted = 0;
	r->bad = -1;
	while (done < n) {
		int k = n - done;
		if (k > r->rcap)
			k = r->rcap;
		fill_recv(r, wrs + done, k);
		struct ibv_recv_wr *bad = NULL;
		int rc = qp ? qp->context->ops.post_recv(qp, r->rwr, &bad)
			    : srq->context->ops.post_srq_recv(srq, r->rwr, &bad);
		if (rc)
			return refused(r, done, k, bad ? bad - r->rwr : 0, rc);
		done += k;
	}
	r->posted = n;
	return 0;
}

int xibv_post_recv(uintptr_t qp, uintptr_t r, const struct xfer_recv_wr *wrs, int n)
{
	return post_recv((struct ibv_qp *)qp, NULL, (struct xibv_ring *)r, wrs, n);
}

int xibv_post_srq_recv(uintptr_t srq, uintptr_t r, const struct xfer_recv_wr *wrs, int n)
{
	return post_recv(NULL, (struct ibv_srq *)srq, (struct xibv_ring *)r, wrs, n);
}

int xibv_poll_cq(uintptr_t cqh, uintptr_t bufh, int n, struct xfer_wc *out)
{
	struct ibv_cq *cq = (struct ibv_cq *)cqh;
	struct ibv_wc *buf = (struct ibv_wc *)bufh;
	int k = cq->context->ops.poll_cq(cq, n, buf);
	for (int i = 0; i < k; i++) {
		const struct ibv_wc *w = &buf[i];
		struct xfer_wc *o = &out[i];
		o->id = w->wr_id;
		o->status = w->status;
		o->opcode = w->opcode;
		o->vendor_err = w->vendor_err;
		o->byte_len = w->byte_len;
		o->has_imm = (w->wc_flags & IBV_WC_WITH_IMM) != 0;
		o->imm = o->has_imm ? ntohl(w->imm_data) : 0;
		o->qp_num = w->qp_num;
		o->src_qp = w->src_qp;
	}
	return k;
}

int xibv_req_notify_cq(uintptr_t cqh, int solicited_only)
{
	struct ibv_cq *cq = (struct ibv_cq *)cqh;
	return norm(cq->context->ops.req_notify_cq(cq, solicited_only));
}

/* ---- control path ---- */

struct ibv_device **xibv_get_device_list(int *n) { return xibv.get_device_list(n); }
void xibv_free_device_list(struct ibv_device **list) { xibv.free_device_list(list); }
struct ibv_context *xibv_open_device(struct ibv_device *dev) { return xibv.open_device(dev); }
int xibv_close_device(struct ibv_context *ctx) { return xibv.close_device(ctx); }

int xibv_query_device(struct ibv_context *ctx, struct ibv_device_attr *attr)
{
	return xibv.query_device(ctx, attr);
}

int xibv_query_port(struct ibv_context *ctx, int port, struct ibv_port_attr *attr)
{
	memset(attr, 0, sizeof(*attr));
	return xibv.query_port(ctx, (uint8_t)port, attr);
}

int xibv_query_gid(struct ibv_context *ctx, int port, int index, union ibv_gid *gid)
{
	return xibv.query_gid(ctx, (uint8_t)port, index, gid);
}

struct ibv_pd *xibv_alloc_pd(struct ibv_context *ctx) { return xibv.alloc_pd(ctx); }
int xibv_dealloc_pd(struct ibv_pd *pd) { return xibv.dealloc_pd(pd); }

struct ibv_mw *xibv_alloc_mw(struct ibv_pd *pd)
{
	if (!pd->context->ops.alloc_mw) {
		errno = EOPNOTSUPP;
		return NULL;
	}
	struct ibv_mw *mw = pd->context->ops.alloc_mw(pd, IBV_MW_TYPE_2);
	if (mw)
		mw->type = IBV_MW_TYPE_2;
	return mw;
}

int xibv_dealloc_mw(struct ibv_mw *mw)
{
	if (!mw->context->ops.dealloc_mw)
		return EOPNOTSUPP;
	return mw->context->ops.dealloc_mw(mw);
}

int xibv_post_bind_mw(struct ibv_qp *qp, uint64_t id, unsigned int flags, struct ibv_mw *mw,
		      uint32_t rkey, struct ibv_mr *mr, uint64_t addr, uint64_t length,
		      unsigned int access)
{
	struct ibv_send_wr w, *bad = NULL;
	memset(&w, 0, sizeof(w));
	w.wr_id = id;
	w.opcode = IBV_WR_BIND_MW;
	w.send_flags = flags;
	w.bind_mw.mw = mw;
	w.bind_mw.rkey = rkey;
	w.bind_mw.bind_info.mr = mr;
	w.bind_mw.bind_info.addr = addr;
	w.bind_mw.bind_info.length = length;
	w.bind_mw.bind_info.mw_access_flags = access;
	return norm(qp->context->ops.post_send(qp, &w, &bad));
}

int xibv_post_local_inv(struct ibv_qp *qp, uint64_t id, unsigned int flags, uint32_t rkey)
{
	struct ibv_send_wr w, *bad = NULL;
	memset(&w, 0, sizeof(w));
	w.wr_id = id;
	w.opcode = IBV_WR_LOCAL_INV;
	w.send_flags = flags;
	w.invalidate_rkey = rkey;
	return norm(qp->context->ops.post_send(qp, &w, &bad));
}

struct ibv_mr *xibv_reg_mr(struct ibv_pd *pd, uintptr_t addr, size_t length, int access)
{
	return xibv.reg_mr(pd, (void *)addr, length, access);
}

struct ibv_mr *xibv_reg_dmabuf_mr(struct ibv_pd *pd, uint64_t offset, size_t length, uint64_t iova,
				  int fd, int access)
{
	if (!reg_dmabuf_mr) {
		errno = ENOSYS;
		return NULL;
	}
	return reg_dmabuf_mr(pd, offset, length, iova, fd, access);
}

int xibv_dereg_mr(struct ibv_mr *mr) { return xibv.dereg_mr(mr); }

struct ibv_comp_channel *xibv_create_comp_channel(struct ibv_context *ctx)
{
	return xibv.create_comp_channel(ctx);
}

int xibv_destroy_comp_channel(struct ibv_comp_channel *ch) { return xibv.destroy_comp_channel(ch); }

struct ibv_cq *xibv_create_cq(struct ibv_context *ctx, int cqe, struct ibv_comp_channel *ch)
{
	return xibv.create_cq(ctx, cqe, NULL, ch, 0);
}

int xibv_destroy_cq(struct ibv_cq *cq) { return xibv.destroy_cq(cq); }

int xibv_get_cq_event(struct ibv_comp_channel *ch, struct ibv_cq **cq)
{
	void *ctx;
	return xibv.get_cq_event(ch, cq, &ctx);
}

void xibv_ack_cq_events(struct ibv_cq *cq, unsigned int n) { xibv.ack_cq_events(cq, n); }

struct ibv_srq *xibv_create_srq(struct ibv_pd *pd, struct ibv_srq_init_attr *attr)
{
	return xibv.create_srq(pd, attr);
}

int xibv_destroy_srq(struct ibv_srq *srq) { return xibv.destroy_srq(srq); }

struct ibv_qp *xibv_create_qp(struct ibv_pd *pd, struct ibv_qp_init_attr *attr)
{
	return xibv.create_qp(pd, attr);
}

int xibv_modify_qp(struct ibv_qp *qp, struct ibv_qp_attr *attr, int mask)
{
	return xibv.modify_qp(qp, attr, mask);
}

int xibv_query_qp_mtu(struct ibv_qp *qp, int *mtu)
{
	struct ibv_qp_attr attr;
	struct ibv_qp_init_attr init;
	memset(&attr, 0, sizeof(attr));
	int rc = xibv.query_qp(qp, &attr, IBV_QP_STATE | IBV_QP_PATH_MTU, &init);
	if (rc == 0)
		*mtu = attr.path_mtu;
	return rc;
}

int xibv_query_qp_state(struct ibv_qp *qp, int *state)
{
	struct ibv_qp_attr attr;
	struct ibv_qp_init_attr init;
	memset(&attr, 0, sizeof(attr));
	int rc = xibv.query_qp(qp, &attr, IBV_QP_STATE, &init);
	if (rc == 0)
		*state = attr.qp_state;
	return rc;
}

int xibv_destroy_qp(struct ibv_qp *qp) { return xibv.destroy_qp(qp); }

int xibv_modify_qp_kern(struct ibv_qp *qp, int state, const void *kern, unsigned int mask_off,
			int dest_rd, int rd)
{
	struct ibv_qp_attr attr;
	uint32_t mask;

	memset(&attr, 0, sizeof(attr));
	xibv.copy_qp_attr_from_kern(&attr, kern);
	/* Not copied: the caller says which state the attributes are for. */
	attr.qp_state = (enum ibv_qp_state)state;
	memcpy(&mask, kern, sizeof(mask));
	mask &= ~mask_off;
	if (dest_rd >= 0)
		attr.max_dest_rd_atomic = (uint8_t)dest_rd;
	if (rd >= 0)
		attr.max_rd_atomic = (uint8_t)rd;
	return xibv.modify_qp(qp, &attr, (int)mask);
}

int xibv_device_index(const char *name)
{
	int n, idx = -1;
	struct ibv_device **l;

	if (!get_device_index)
		return -1;
	l = xibv.get_device_list(&n);
	if (!l)
		return -1;
	for (int i = 0; i < n; i++)
		if (strcmp(l[i]->name, name) == 0)
			idx = get_device_index(l[i]);
	xibv.free_device_list(l);
	return idx;
}

/* ---- the ABI table ---- */

#define ABI(e) { #e, (long long)(e) },
#define ABI_AS(sys, mine) { #sys, (long long)(mine) },
static const struct xibv_abi_item abi_items[] = {
#include "abi_table.h"
};

const struct xibv_abi_item *xibv_abi_table(int *n)
{
	*n = (int)(sizeof(abi_items) / sizeof(abi_items[0]));
	return abi_items;
}
