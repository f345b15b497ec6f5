/*
 * All to all among the ranks of an MPI job, the figures `btl alltoall`
 * gives, measured the same way, so that Open MPI is the reference beside
 * btl under the same launch. For each message size:
 *
 *   - latency: the pairs meet in rounds (the circle method: N - 1 rounds
 *     for an even N, N for an odd one); in each, the lower rank of a pair
 *     pings and the higher answers; one-way latency is a round trip halved;
 *   - bandwidth: in the same rounds both ranks of a pair send windows of
 *     16 messages to each other at once;
 *   - puts: the same windows as MPI_Put into the partner's window
 *     (passive target, flushed after each window).
 *
 * Rank 0 prints one line per size:
 *
 *   size samples median_us p99_us aggregate_MB/s put_MB/s
 *
 * where the latency figures are over every pair's round trips and the
 * aggregate is all ranks' bytes over the span from the first rank's start
 * to the last one's end (wall clock: one host, or hosts that agree).
 *
 *   mpicc -O2 -o mpi_alltoall mpi_alltoall.c
 *   mpirun -np 4 --mca btl self,vader,tcp ./mpi_alltoall [SIZE...]
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>

#define WINDOW 16
#define ITERS 200
#define BUDGET (32 << 20)

static double wall(void)
{
    struct timeval tv;
    gettimeofday(&tv, NULL);
    return tv.tv_sec + tv.tv_usec * 1e-6;
}

static int cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* The partner of `rank` in `round` among `m` (even) places; as btl's. */
static int partner(int round, int rank, int m)
{
    int n = m - 1;
    if (rank == n) {
        for (int j = 0; j < n; j++)
            if ((2 * j) % n == round % n)
                return j;
        return 0;
    }
    int p = (round % n + n - rank) % n;
    return p == rank ? n : p;
}

static int round_trips(long size)
{
    long cap = BUDGET / (2 * (size > 0 ? size : 1));
    if (cap < 10)
        cap = 10;
    return ITERS < cap ? ITERS : (int)cap;
}

static int windows(long size)
{
    long w = BUDGET / ((size > 0 ? size : 1) * WINDOW);
    if (w < 2)
        w = 2;
    if (w > 64)
        w = 64;
    return (int)w;
}

static long parse_size(const char *s)
{
    char *end;
    long v = strtol(s, &end, 10);
    if (*end == 'k' || *end == 'K')
        v <<= 10;
    else if (*end == 'M' || *end == 'm')
        v <<= 20;
    return v;
}

int main(int argc, char **argv)
{
    int rank, n;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &n);
    long sizes[64] = {8, 4096, 65536, 1 << 20};
    int nsizes = 4;
    if (argc > 1) {
        nsizes = 0;
        for (int i = 1; i < argc && nsizes < 64; i++)
            sizes[nsizes++] = parse_size(argv[i]);
    }
    long max = 1;
    for (int i = 0; i < nsizes; i++)
        if (sizes[i] > max)
            max = sizes[i];
    char *out = malloc(max), *in = malloc((size_t)max * WINDOW);
    memset(out, 7, max);
    char *landing;
    MPI_Win win;
    MPI_Win_allocate(max, 1, MPI_INFO_NULL, MPI_COMM_WORLD, &landing, &win);
    MPI_Win_lock_all(0, win);
    int places = n + n % 2;
    int *partners = malloc(sizeof(int) * places);
    int npartners = 0;
    for (int r = 0; r < places - 1; r++) {
        int p = partner(r, rank, places);
        if (p < n)
            partners[npartners++] = p;
    }
    MPI_Request reqs[2 * WINDOW];

    for (int s = 0; s < nsizes; s++) {
        long size = sizes[s];
        int iters = round_trips(size), warmup = iters / 10 < 2 ? 2 : iters / 10;
        double *samples = malloc(sizeof(double) * (size_t)iters * npartners);
        int nsamples = 0;
        MPI_Barrier(MPI_COMM_WORLD);
        for (int k = 0; k < npartners; k++) {
            int p = partners[k];
            double t = MPI_Wtime();
            for (int i = 0; i < warmup + iters; i++) {
                if (rank < p) {
                    MPI_Send(out, size, MPI_CHAR, p, 1, MPI_COMM_WORLD);
                    MPI_Recv(in, size, MPI_CHAR, p, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
                    double now = MPI_Wtime();
                    if (i >= warmup)
                        samples[nsamples++] = (now - t) * 1e6 / 2;
                    t = now;
                } else {
                    MPI_Recv(in, size, MPI_CHAR, p, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
                    MPI_Send(out, size, MPI_CHAR, p, 1, MPI_COMM_WORLD);
                }
            }
        }
        int w = windows(size);
        double spans[4];
        long bytes = 0;
        MPI_Barrier(MPI_COMM_WORLD);
        spans[0] = wall();
        for (int k = 0; k < npartners; k++) {
            int p = partners[k];
            for (int j = 0; j < w; j++) {
                for (int m = 0; m < WINDOW; m++) {
                    MPI_Irecv(in + (size_t)m * size, size, MPI_CHAR, p, 2, MPI_COMM_WORLD, &reqs[m]);
                    MPI_Isend(out, size, MPI_CHAR, p, 2, MPI_COMM_WORLD, &reqs[WINDOW + m]);
                }
                MPI_Waitall(2 * WINDOW, reqs, MPI_STATUSES_IGNORE);
                bytes += size * WINDOW;
            }
        }
        spans[1] = wall();
        MPI_Barrier(MPI_COMM_WORLD);
        spans[2] = wall();
        for (int k = 0; k < npartners; k++) {
            int p = partners[k];
            for (int j = 0; j < w; j++) {
                for (int m = 0; m < WINDOW; m++)
                    MPI_Put(out, size, MPI_CHAR, p, 0, size, MPI_CHAR, win);
                MPI_Win_flush(p, win);
            }
        }
        spans[3] = wall();

        /* Rank 0 gathers every sample, the bytes and the spans. */
        int *counts = NULL, *displs = NULL;
        double *all = NULL, *allspans = NULL;
        if (rank == 0) {
            counts = malloc(sizeof(int) * n);
            displs = malloc(sizeof(int) * n);
            allspans = malloc(sizeof(double) * 4 * n);
        }
        MPI_Gather(&nsamples, 1, MPI_INT, counts, 1, MPI_INT, 0, MPI_COMM_WORLD);
        int total = 0;
        if (rank == 0) {
            for (int r = 0; r < n; r++) {
                displs[r] = total;
                total += counts[r];
            }
            all = malloc(sizeof(double) * (total > 0 ? total : 1));
        }
        MPI_Gatherv(samples, nsamples, MPI_DOUBLE, all, counts, displs, MPI_DOUBLE, 0, MPI_COMM_WORLD);
        MPI_Gather(spans, 4, MPI_DOUBLE, allspans, 4, MPI_DOUBLE, 0, MPI_COMM_WORLD);
        long allbytes = 0;
        MPI_Reduce(&bytes, &allbytes, 1, MPI_LONG, MPI_SUM, 0, MPI_COMM_WORLD);
        if (rank == 0) {
            qsort(all, total, sizeof(double), cmp);
            double median = total ? all[(int)((total - 1) * 0.5 + 0.5)] : 0;
            double p99 = total ? all[(int)((total - 1) * 0.99 + 0.5)] : 0;
            double s0 = allspans[0], s1 = allspans[1], p0 = allspans[2], p1 = allspans[3];
            for (int r = 1; r < n; r++) {
                if (allspans[4 * r] < s0) s0 = allspans[4 * r];
                if (allspans[4 * r + 1] > s1) s1 = allspans[4 * r + 1];
                if (allspans[4 * r + 2] < p0) p0 = allspans[4 * r + 2];
                if (allspans[4 * r + 3] > p1) p1 = allspans[4 * r + 3];
            }
            printf("%ld %d %.3f %.3f %.1f %.1f\n", size, total, median, p99,
                   s1 > s0 ? allbytes / (s1 - s0) / 1e6 : 0,
                   p1 > p0 ? allbytes / (p1 - p0) / 1e6 : 0);
            fflush(stdout);
            free(counts);
            free(displs);
            free(all);
            free(allspans);
        }
        free(samples);
    }
    MPI_Win_unlock_all(win);
    MPI_Win_free(&win);
    free(partners);
    free(out);
    free(in);
    MPI_Finalize();
    return 0;
}
