/*
 * One-way latency, bandwidth and message rate between two MPI ranks, the
 * figures `btl pingpong`, `btl bw` and `btl rate` give, so that Open MPI
 * is measured the way btl is. Rank 0 prints one line per size:
 *
 *   test size iters value unit
 *
 * pingpong: median one-way latency in microseconds (a round trip halved,
 *           over `reps` rounds of `iters` round trips each);
 * bw:       bandwidth in MB/s (10^6 bytes) of windows of 64 messages, each
 *           window answered by a 1-byte acknowledgement;
 * rate:     8-byte messages per second, in windows of 64.
 *
 * Build and run with benchmarks/peers, or by hand:
 *   mpicc -O2 -o mpi_pingpong mpi_pingpong.c
 *   mpirun -np 2 --bind-to core ./mpi_pingpong
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_SIZE (4 << 20)
#define WINDOW 64
#define REPS 5

static int cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static int iters_for(int size)
{
    if (size <= 65536)
        return 1000;
    return 1000 / (size / 65536) > 20 ? 1000 / (size / 65536) : 20;
}

int main(int argc, char **argv)
{
    int rank, peer;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    peer = 1 - rank;
    char *buf = malloc(MAX_SIZE);
    char *win = malloc((size_t)WINDOW * MAX_SIZE / 16);
    memset(buf, 7, MAX_SIZE);

    for (int size = 1; size <= MAX_SIZE; size *= 2) {
        int iters = iters_for(size);
        double rounds[REPS];
        for (int r = 0; r < REPS; r++) {
            /* warm-up */
            for (int i = 0; i < 10; i++) {
                if (rank == 0) {
                    MPI_Send(buf, size, MPI_CHAR, peer, 1, MPI_COMM_WORLD);
                    MPI_Recv(buf, size, MPI_CHAR, peer, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
                } else {
                    MPI_Recv(buf, size, MPI_CHAR, peer, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
                    MPI_Send(buf, size, MPI_CHAR, peer, 1, MPI_COMM_WORLD);
                }
            }
            double t = MPI_Wtime();
            for (int i = 0; i < iters; i++) {
                if (rank == 0) {
                    MPI_Send(buf, size, MPI_CHAR, peer, 1, MPI_COMM_WORLD);
                    MPI_Recv(buf, size, MPI_CHAR, peer, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
                } else {
                    MPI_Recv(buf, size, MPI_CHAR, peer, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
                    MPI_Send(buf, size, MPI_CHAR, peer, 1, MPI_COMM_WORLD);
                }
            }
            rounds[r] = (MPI_Wtime() - t) / iters / 2 * 1e6;
        }
        qsort(rounds, REPS, sizeof rounds[0], cmp);
        if (rank == 0)
            printf("pingpong %d %d %.3f us\n", size, iters, rounds[REPS / 2]);
    }

    /* Bandwidth: windows of 64 messages from 64 KiB up, each message in a
     * buffer of its own up to 64 KiB (larger ones share one). */
    for (int size = 65536; size <= MAX_SIZE; size *= 2) {
        int windows = size <= 1 << 20 ? 20 : 5;
        MPI_Request req[WINDOW];
        char ack = 0;
        double t = 0;
        for (int w = -1; w < windows; w++) {
            if (w == 0)
                t = MPI_Wtime();
            for (int i = 0; i < WINDOW; i++) {
                char *b = size <= 65536 ? win + (size_t)i * size : buf;
                if (rank == 0)
                    MPI_Isend(b, size, MPI_CHAR, peer, 2, MPI_COMM_WORLD, &req[i]);
                else
                    MPI_Irecv(b, size, MPI_CHAR, peer, 2, MPI_COMM_WORLD, &req[i]);
            }
            MPI_Waitall(WINDOW, req, MPI_STATUSES_IGNORE);
            if (rank == 0)
                MPI_Recv(&ack, 1, MPI_CHAR, peer, 3, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            else
                MPI_Send(&ack, 1, MPI_CHAR, peer, 3, MPI_COMM_WORLD);
        }
        double s = MPI_Wtime() - t;
        if (rank == 0)
            printf("bw %d %d %.1f MB/s\n", size, windows * WINDOW,
                   (double)size * WINDOW * windows / s / 1e6);
    }

    /* Message rate: 8-byte messages in windows of 64. */
    {
        int windows = 20000;
        MPI_Request req[WINDOW];
        char ack = 0;
        double t = 0;
        for (int w = -100; w < windows; w++) {
            if (w == 0)
                t = MPI_Wtime();
            for (int i = 0; i < WINDOW; i++) {
                if (rank == 0)
                    MPI_Isend(win + i * 8, 8, MPI_CHAR, peer, 4, MPI_COMM_WORLD, &req[i]);
                else
                    MPI_Irecv(win + i * 8, 8, MPI_CHAR, peer, 4, MPI_COMM_WORLD, &req[i]);
            }
            MPI_Waitall(WINDOW, req, MPI_STATUSES_IGNORE);
            if (rank == 0)
                MPI_Recv(&ack, 1, MPI_CHAR, peer, 5, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            else
                MPI_Send(&ack, 1, MPI_CHAR, peer, 5, MPI_COMM_WORLD);
        }
        double s = MPI_Wtime() - t;
        if (rank == 0)
            printf("rate 8 %d %.0f msg/s\n", windows * WINDOW, (double)windows * WINDOW / s);
    }
    free(buf);
    free(win);
    MPI_Finalize();
    return 0;
}
