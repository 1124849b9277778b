/*
 * runner.c: store_contract, the one contract suite every store passes,
 * unchanged.
 *
 *   store_contract URL [CASE...]         run against URL
 *   store_contract --temp-sqlite [CASE...]   a SQLite file in a fresh temp dir
 *   store_contract --env VAR [CASE...]   the URL in $VAR; exit 77 (skipped)
 *                                        when VAR is unset or empty
 *
 * The cases are the tables of the concept files (contract.h), run in the
 * order of `tables` below.  Each case runs in its own forked process
 * (check_fork_run of check.h, as libuv's runner does), so a failed CHECK
 * aborts that case only and the others still report.  The exit code is 1
 * when a case failed, 77 when every case chosen skipped (ctest runs one case
 * an entry, see tests/CMakeLists.txt), else 0.
 */
#include "contract.h"

#include <time.h>
#include <unistd.h>

#define CASE_SECONDS 90

const char *g_url;
char g_run[64];
char g_sqlite_file[512];
int g_memory;
int64_t g_case_start_ms;

/* The concept files, in the order their cases run.  A file whose table is
 * not here is not run: tests/CMakeLists.txt registers its cases, and each of
 * them then fails with "no case named". */
static const contract_table_t *const tables[] = {
    &contract_lifecycle, &contract_nodes, &contract_writes,
    &contract_content,   &contract_paths, &contract_queries,
    &contract_items,     &contract_feed,  &contract_access,
};
#define NTABLES (sizeof tables / sizeof tables[0])

static const contract_case_t *find_case(const char *name) {
  for (size_t t = 0; t < NTABLES; t++)
    for (size_t c = 0; c < tables[t]->count; c++)
      if (strcmp(tables[t]->cases[c].name, name) == 0)
        return &tables[t]->cases[c];
  return NULL;
}

/* In the case's process: the case's clock starts, then the case runs. */
static void run_case(const void *arg) {
  g_case_start_ms = now_ms();
  ((const contract_case_t *)arg)->fn();
}

static int usage(void) {
  fprintf(
      stderr,
      "usage: store_contract (URL | --temp-sqlite | --env VAR) [CASE...]\n");
  return 2;
}

int main(int argc, char **argv) {
  setvbuf(stdout, NULL, _IONBF, 0);
  /* Two files giving a case the same name would run it twice and register
   * it with ctest once: refuse that at once. */
  for (size_t t = 0; t < NTABLES; t++)
    for (size_t c = 0; c < tables[t]->count; c++)
      if (find_case(tables[t]->cases[c].name) != &tables[t]->cases[c]) {
        fprintf(stderr, "two cases are named %s\n", tables[t]->cases[c].name);
        return 2;
      }
  if (argc < 2)
    return usage();
  char tmpdir[] = "/tmp/durable-contract-XXXXXX";
  char url[1200];
  int temp = 0;
  int argi = 2;
  if (strcmp(argv[1], "--temp-sqlite") == 0) {
    if (mkdtemp(tmpdir) == NULL) {
      perror("mkdtemp");
      return 1;
    }
    temp = 1;
    snprintf(url, sizeof(url), "sqlite:%s/contract.db", tmpdir);
    g_url = url;
  } else if (strcmp(argv[1], "--env") == 0) {
    if (argc < 3)
      return usage();
    const char *v = getenv(argv[2]);
    if (v == NULL || v[0] == '\0') {
      printf("SKIP: %s is not set, so the contract is not run on that store "
             "(set it to a store URL to run it)\n",
             argv[2]);
      return 77;
    }
    g_url = v;
    argi = 3;
  } else {
    g_url = argv[1];
  }
  g_memory = strcmp(g_url, "sqlite::memory:") == 0;
  if (!g_memory && strncmp(g_url, "sqlite:", 7) == 0) {
    snprintf(g_sqlite_file, sizeof(g_sqlite_file), "%s", g_url + 7);
    char *q = strchr(g_sqlite_file, '?');
    if (q)
      *q = '\0';
  }
  snprintf(g_run, sizeof(g_run), "ct%lld_%d", (long long)time(NULL),
           (int)getpid());
  printf("# store %s, run partition %s\n", g_url, g_run);

  for (int i = argi; i < argc; i++) {
    if (find_case(argv[i]) == NULL) {
      fprintf(stderr, "no case named %s\n", argv[i]);
      if (temp)
        check_remove_dir(tmpdir);
      return usage();
    }
  }

  check_tally_t tally = {0, 0, 0};
  for (size_t t = 0; t < NTABLES; t++) {
    for (size_t c = 0; c < tables[t]->count; c++) {
      const contract_case_t *one = &tables[t]->cases[c];
      if (argi < argc) {
        int chosen = 0;
        for (int i = argi; i < argc; i++)
          if (strcmp(argv[i], one->name) == 0)
            chosen = 1;
        if (!chosen)
          continue;
      }
      check_fork_run(&tally, one->name, run_case, one, CASE_SECONDS);
    }
  }
  /* every case chosen skipped (one case per ctest entry): say so, as 77 */
  int rc = check_tally_end(&tally, g_url);
  if (temp)
    check_remove_dir(tmpdir);
  return rc;
}
