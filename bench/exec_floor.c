/* The floor of a warm exec on this host: the least any "client asks a running
 * agent to run a command" design can cost, with no isolation, no protocol and
 * no checks. `exec_floor serve SOCK` accepts connections and, for each, forks,
 * execs /bin/true, waits and answers its exit status in one byte.
 * `exec_floor SOCK` is the client: a process that starts (libc only, as sbx),
 * connects, asks and exits with the answer. bench/exec_latency.sh times the
 * client beside `sbx exec ID -- /bin/true` and `crun exec`.
 * `exec_floor loop N` is the floor of an exec service's throughput on one
 * core: vfork, exec /bin/true and wait, N times, nothing else; it prints the
 * execs per second. bench/manager_throughput.sh runs one, and one per core.
 */
#define _GNU_SOURCE  /* accept4 */
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static int address(const char* path, struct sockaddr_un* a) {
  memset(a, 0, sizeof *a);
  a->sun_family = AF_UNIX;
  if (strlen(path) >= sizeof a->sun_path) return -1;
  strcpy(a->sun_path, path);
  return 0;
}

static int serve(const char* path) {
  struct sockaddr_un a;
  int l = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (l < 0 || address(path, &a) || bind(l, (struct sockaddr*)&a, sizeof a) || listen(l, 64)) {
    perror("exec_floor: listen");
    return 1;
  }
  for (;;) {
    int c = accept4(l, NULL, NULL, SOCK_CLOEXEC);
    if (c < 0) continue;
    char ask;
    if (read(c, &ask, 1) == 1) {
      unsigned char status = 125;
      pid_t p = fork();
      if (p == 0) {
        execl("/bin/true", "/bin/true", (char*)NULL);
        _exit(127);
      }
      int ws;
      if (p > 0 && waitpid(p, &ws, 0) == p && WIFEXITED(ws)) status = (unsigned char)WEXITSTATUS(ws);
      if (write(c, &status, 1) != 1) perror("exec_floor: answer");
    }
    close(c);
  }
}

static int loop(int n) {
  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  for (int i = 0; i < n; ++i) {
    pid_t p = vfork();
    if (p == 0) {
      execl("/bin/true", "/bin/true", (char*)NULL);
      _exit(127);
    }
    int ws;
    if (p < 0 || waitpid(p, &ws, 0) != p || !WIFEXITED(ws) || WEXITSTATUS(ws) != 0) {
      fprintf(stderr, "exec_floor: /bin/true failed\n");
      return 1;
    }
  }
  clock_gettime(CLOCK_MONOTONIC, &t1);
  printf("%.0f\n", n / ((double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9));
  return 0;
}

int main(int argc, char** argv) {
  if (argc == 3 && strcmp(argv[1], "serve") == 0) return serve(argv[2]);
  if (argc == 3 && strcmp(argv[1], "loop") == 0) return loop(atoi(argv[2]));
  if (argc != 2) {
    fprintf(stderr, "usage: exec_floor serve SOCK | exec_floor SOCK | exec_floor loop N\n");
    return 2;
  }
  struct sockaddr_un a;
  int s = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  unsigned char status;
  if (s < 0 || address(argv[1], &a) || connect(s, (struct sockaddr*)&a, sizeof a) || write(s, "x", 1) != 1 ||
      read(s, &status, 1) != 1) {
    perror("exec_floor");
    return 125;
  }
  return status;
}
