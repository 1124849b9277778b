/*
 * files.c: the files the command reads by name -- plugins and scripts.
 *
 * `durable run PLUGIN` takes a path (plugins/document_log.lua) or, for a
 * plugin that is installed, its bare name (document_log): a name that is no
 * file here is looked up as NAME.lua in $DURABLE_PLUGIN_PATH (folders
 * separated by ':'), then in the plugins folder installed beside this
 * command (BINDIR/../share/durable/plugins, found from /proc/self/exe so
 * that an install under any prefix finds its own), then in the source
 * tree's plugins/ this command was built from (so build/durable finds them
 * too).  Not found, the error names every place it looked.
 *
 * Whatever is read must be a regular file: a FIFO nobody writes would have
 * Lua's loadfile wait forever with nothing said, and a directory or a
 * device is not a Lua chunk either.
 */
#include "cli.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#ifndef DURABLE_PLUGINS_FROM_BIN
#define DURABLE_PLUGINS_FROM_BIN "../share/durable/plugins"
#endif
#ifndef DURABLE_SOURCE_PLUGINS
#define DURABLE_SOURCE_PLUGINS "plugins"
#endif

static const char *kind_of(mode_t mode) {
  return S_ISDIR(mode)    ? "a directory"
         : S_ISFIFO(mode) ? "a FIFO"
         : S_ISSOCK(mode) ? "a socket"
                          : "a device";
}

int cli_check_file(const cli_t *cli, const char *what, const char *path) {
  struct stat st;
  if (stat(path, &st) != 0 || access(path, R_OK) != 0)
    return cli_error(cli, CLI_FAILED, "cannot read %s '%s': %s", what, path,
                     strerror(errno));
  if (!S_ISREG(st.st_mode))
    return cli_error(cli, CLI_FAILED, "%s '%s' is not a regular file (%s)",
                     what, path, kind_of(st.st_mode));
  return CLI_OK;
}

/* The plugins folder installed beside this executable, into `out`. */
static int installed_plugins(char *out, size_t size) {
  char exe[4096];
  ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
  if (n <= 0)
    return -1;
  exe[n] = '\0';
  char *slash = strrchr(exe, '/');
  if (slash == NULL)
    return -1;
  *slash = '\0';
  int m = snprintf(out, size, "%s/" DURABLE_PLUGINS_FROM_BIN, exe);
  if (m < 0 || (size_t)m >= size)
    return -1;
  char *real = realpath(out, NULL); /* /usr/share/..., not /usr/bin/../share */
  if (real != NULL && strlen(real) < size)
    strcpy(out, real);
  free(real);
  return 0;
}

/* Whether this executable is the one in the build tree (build/durable),
 * not an installed copy: only that one looks in the source tree, whose
 * folder an installed command must not trust (it may be anyone's /tmp). */
static int run_from_build_tree(void) {
#ifdef DURABLE_BUILT_IN
  char exe[4096];
  ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
  char *slash = n > 0 ? (exe[n] = '\0', strrchr(exe, '/')) : NULL;
  if (slash == NULL)
    return 0;
  *slash = '\0';
  char *built = realpath(DURABLE_BUILT_IN, NULL);
  int same = built != NULL && strcmp(built, exe) == 0;
  free(built);
  return same;
#else
  return 0;
#endif
}

/* DIR/NAME.lua into `found` when it is a regular file; `dir` added to
 * `looked`. */
static int look_in(const char *dir, size_t dir_len, const char *name,
                   char *found, size_t size, char *looked, size_t looked_size) {
  size_t used = strlen(looked);
  snprintf(looked + used, looked_size - used, "%s%.*s", used ? ", " : "",
           (int)dir_len, dir);
  int n = snprintf(found, size, "%.*s/%s.lua", (int)dir_len, dir, name);
  struct stat st;
  return n > 0 && (size_t)n < size && stat(found, &st) == 0 &&
         S_ISREG(st.st_mode);
}

int cli_find_plugin(const cli_t *cli, char **plugin) {
  const char *name = *plugin;
  /* a path, or a file of that name here (not a folder): as given */
  struct stat here;
  if (*name != '\0' && stat(name, &here) == 0 && S_ISDIR(here.st_mode))
    return cli_error(cli, CLI_FAILED,
                     "plugin '%s' is not a regular file (a directory): name "
                     "the plugin's file in that folder (durable run "
                     "%s%sNAME.lua)",
                     name, name, name[strlen(name) - 1] == '/' ? "" : "/");
  if (strchr(name, '/') != NULL || *name == '\0' ||
      (stat(name, &here) == 0 && !S_ISDIR(here.st_mode)))
    return cli_check_file(cli, "plugin", name);
  char looked[2048] = "", dir[4096];
  /* the path found replaces the name in argv: it lives as long as the
   * process, one per plugin given */
  enum { FOUND_MAX = 4096 };
  char *out = malloc(FOUND_MAX);
  if (out == NULL)
    return cli_error(cli, CLI_FAILED, "out of memory");
  const char *path = getenv("DURABLE_PLUGIN_PATH");
  for (const char *p = path; p && *p;) {
    size_t n = strcspn(p, ":");
    if (n > 0 && look_in(p, n, name, out, FOUND_MAX, looked, sizeof looked))
      goto found;
    p += n + (p[n] == ':');
  }
  if (installed_plugins(dir, sizeof dir) == 0 &&
      look_in(dir, strlen(dir), name, out, FOUND_MAX, looked, sizeof looked))
    goto found;
  if (run_from_build_tree() &&
      look_in(DURABLE_SOURCE_PLUGINS, strlen(DURABLE_SOURCE_PLUGINS), name, out,
              FOUND_MAX, looked, sizeof looked))
    goto found;
  free(out);
  return cli_error(cli, CLI_FAILED,
                   "no plugin '%s': no file of that name here, and no %s.lua "
                   "in %s%s",
                   name, name, looked,
                   path && *path ? "" : " ($DURABLE_PLUGIN_PATH is unset)");
found:
  *plugin = out;
  return cli_check_file(cli, "plugin", out);
}
