from stbproxy.cli import command_line

command_line()
