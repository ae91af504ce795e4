from kai_cp.cli import console_main

console_main()
