/*
 * test_support.c: the one main loop of the Check suites (test_support.h).
 */
#include "test_support.h"

#include <stdbool.h>
#include <stdlib.h>

static int run(Suite *s, bool fork) {
  SRunner *sr = srunner_create(s);
  if (!fork) srunner_set_fork_status(sr, CK_NOFORK);
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}

int check_run(Suite *s) { return run(s, true); }
int check_run_nofork(Suite *s) { return run(s, false); }
