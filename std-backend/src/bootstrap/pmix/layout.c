/* Checked when btl-std is built with feature `pmix`: every size, offset and
 * constant ffi.rs declares by hand, against the installed PMIx headers. */
#include <stddef.h>
#include <pmix.h>

#define SAME(a, b) _Static_assert((a) == (b), #a " differs from btl's ffi.rs: this PMIx's ABI is not the one btl was written for")

SAME(sizeof(pmix_proc_t), 260);
SAME(offsetof(pmix_proc_t, rank), 256);
SAME(sizeof(pmix_value_t), 32);
SAME(offsetof(pmix_value_t, data), 8);
SAME(sizeof(pmix_data_type_t), 2);
SAME(sizeof(pmix_info_t), 552);
SAME(offsetof(pmix_info_t, flags), 512);
SAME(offsetof(pmix_info_t, value), 520);
SAME(sizeof(pmix_scope_t), 1);
SAME(PMIX_MAX_NSLEN, 255);
SAME(PMIX_MAX_KEYLEN, 511);
SAME(PMIX_SUCCESS, 0);
SAME(PMIX_ERR_UNREACH, -25);
SAME(PMIX_ERR_TIMEOUT, -24);
SAME(PMIX_ERR_NOT_FOUND, -46);
SAME(PMIX_BOOL, 1);
SAME(PMIX_STRING, 3);
SAME(PMIX_INT, 6);
SAME(PMIX_UINT32, 14);
SAME(PMIX_LOCAL, 1);
SAME(PMIX_GLOBAL, 3);
SAME(PMIX_RANK_WILDCARD, 4294967294u);

/* The keys, as strings: a mismatch is a compile error in the initializer. */
static const char job_size[] = PMIX_JOB_SIZE;
static const char local_peers[] = PMIX_LOCAL_PEERS;
static const char collect[] = PMIX_COLLECT_DATA;
static const char timeout[] = PMIX_TIMEOUT;
SAME(sizeof(job_size), sizeof("pmix.job.size"));
SAME(sizeof(local_peers), sizeof("pmix.lpeers"));
SAME(sizeof(collect), sizeof("pmix.collect"));
SAME(sizeof(timeout), sizeof("pmix.timeout"));

/* Something to archive, so that the build has an object to link. */
int btl_pmix_layout_checked(void) { return 1; }
