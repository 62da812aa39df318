/* A native stack sampler for a probe on the chip (bench/_timeline.py, TIMELINE_NATIVE):
 * what a trace's long first stop spends its time in, inside libtpu.
 *
 * sampler_start(path, signo) installs a handler for signo that appends the receiving
 * thread's stack (return addresses, from glibc's backtrace) to path, one record each:
 * int64 CLOCK_MONOTONIC nanoseconds, int64 frame count, then the frames as uint64.
 * The Python side sends signo to the stopping thread (signal.pthread_kill) every few
 * milliseconds; tools/tpu/native_symbols.py turns the records and the process's
 * /proc/self/maps into symbol names, here, with the same libtpu.so. Nothing here runs in
 * jaxtune itself.
 *
 *   cc -O2 -shared -fPIC -o native_sampler.so tools/tpu/native_sampler.c
 */
#include <errno.h>
#include <execinfo.h>
#include <fcntl.h>
#include <signal.h>
#include <stdint.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define MAX_FRAMES 96

static int out_fd = -1;

static void on_signal(int signo, siginfo_t *info, void *context) {
  (void)signo;
  (void)info;
  (void)context;
  int saved = errno;
  int64_t record[2 + MAX_FRAMES];
  struct timespec now;
  clock_gettime(CLOCK_MONOTONIC, &now);
  int n = backtrace((void **)&record[2], MAX_FRAMES);
  record[0] = (int64_t)now.tv_sec * 1000000000 + now.tv_nsec;
  record[1] = n;
  if (out_fd >= 0) {
    ssize_t unused = write(out_fd, record, (size_t)(2 + n) * sizeof(int64_t));
    (void)unused;
  }
  errno = saved;
}

int sampler_start(const char *path, int signo) {
  out_fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_APPEND, 0644);
  if (out_fd < 0) return -1;
  void *warm[4];
  backtrace(warm, 4); /* loads libgcc_s now, not inside a handler */
  struct sigaction action;
  memset(&action, 0, sizeof action);
  action.sa_sigaction = on_signal;
  action.sa_flags = SA_SIGINFO | SA_RESTART;
  sigemptyset(&action.sa_mask);
  return sigaction(signo, &action, NULL);
}
