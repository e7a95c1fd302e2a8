int main(void) { return 1; } /* placeholder, being written */
