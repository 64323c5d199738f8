"""Who may do what on a node.

* ``acl_config``: the users of the ``user`` directives and the ACL file
  (loading, saving, keeping them in step with CONFIG); the rules
  themselves are ``disque.access.acl``'s.
* ``acl_file``: users from ``user`` lines (an aclfile's or the config's).
* ``categories``: the command categories, the permission key of a command,
  and which queues and jobs a command names.
* ``protection``: protected mode and ``enable-debug-command`` (what a
  connection from beyond loopback may do while no password is set).
* ``failed_auth``: failed authentications counted, logged once a minute per
  source, and throttled.

Nothing here touches a socket or the reactor directly: the runtime
(``disque.node``) and the protocols call in with what they saw.
"""
