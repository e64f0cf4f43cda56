/* Three ways for an agent to start an exec's shim, side by side, with nothing
 * else (docs/speed.md, "What an exec costs in page faults").
 *   fork:  what sbx's agent did until 2026-12-07. It forks the shim; the
 *          shim vforks the command. The fork write-protects the agent's
 *          pages, so its next writes are copy-on-write faults, and the shim
 *          faults in what it touches and unmaps its copy at exit.
 *   spawn: the agent vforks and execs a small static shim (this program,
 *          named "shim"), which vforks the command. No page of the agent is
 *          ever write-protected, but each exec loads the shim.
 *   clone: what sbx's agent does now. The shim is a clone of the agent that
 *          shares its memory (CLONE_VM) on a stack of its own, and vforks
 *          the command. Nothing is copied, write-protected or loaded.
 * The "agent" holds 1.5 MiB (sbx-sandbox's resident size) and writes 20
 * pages between execs (the agent's 19-22 faults per exec). The command is
 * /bin/true. Usage: shim_model fork|spawn|clone N; prints microseconds per exec.
 * Link it static, as a shim would be: bench/shim_model.sh does.
 */
#define _GNU_SOURCE
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

static void run_true_and_exit(void) {
  pid_t c = vfork();
  if (c == 0) {
    execl("/bin/true", "true", (char*)0);
    _exit(127);
  }
  int st;
  waitpid(c, &st, 0);
  _exit(0);
}

static int clone_shim(void* arg) {
  (void)arg;
  run_true_and_exit();
  return 0;
}

int main(int argc, char** argv) {
  if (strcmp(argv[0], "shim") == 0) run_true_and_exit();
  if (argc != 3) {
    fprintf(stderr, "usage: shim_model fork|spawn|clone N\n");
    return 2;
  }
  const size_t size = 1536 * 1024, pages = size / 4096;
  char* heap = malloc(size);
  if (!heap) return 1;
  memset(heap, 1, size);
  int n = atoi(argv[2]), spawn = strcmp(argv[1], "spawn") == 0, cloned = strcmp(argv[1], "clone") == 0;
  const size_t stack_size = 64 * 1024;
  char* stack = mmap(NULL, stack_size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_STACK, -1, 0);
  if (stack == MAP_FAILED) return 1;
  double t0 = now();
  for (int i = 0; i < n; ++i) {
    for (int p = 0; p < 20; ++p) heap[((size_t)(i * 20 + p) % pages) * 4096] = (char)i;
    /* One shim at a time, so one stack serves them all. */
    pid_t pid = cloned ? clone(clone_shim, stack + stack_size, CLONE_VM | SIGCHLD, NULL) : spawn ? vfork() : fork();
    if (pid == 0) {
      if (spawn) {
        execl("/proc/self/exe", "shim", (char*)0);
        _exit(127);
      }
      run_true_and_exit();
    }
    int st;
    waitpid(pid, &st, 0);
  }
  printf("%s %.1f\n", argv[1], (now() - t0) / n * 1e6);
  return 0;
}
