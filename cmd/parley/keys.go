package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/parleyhq/parley/auth"
)

// runKeys manages API keys in the database: parley keys create|list|revoke.
func runKeys(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	if len(args) == 0 || strings.HasPrefix(args[0], "-") {
		return errors.New("keys: want a command: parley keys create|list|revoke [flags]")
	}
	cmd, args := args[0], args[1:]
	fs := flagSet("keys "+cmd, stderr, map[string]string{
		"create": "Makes an API key and prints its secret once: parley keys create --user NAME [--name LABEL] [--admin] [--expires-in 720h]",
		"list":   "Lists API keys (never their secrets): parley keys list [--user NAME]",
		"revoke": "Revokes an API key: parley keys revoke ID",
	}[cmd])
	db := fs.String("db", "parley.db", "SQLite database file")
	databaseURL := fs.String("database-url", "", "PostgreSQL URL (postgres://…); when set, used instead of --db")
	user := fs.String("user", "", "the user the key acts as (create), or whose keys to list")
	name := fs.String("name", "", "a label for the key")
	admin := fs.Bool("admin", false, "the key may manage keys through the admin API")
	expiresIn := fs.Duration("expires-in", 0, "the key expires after this long (0: never)")
	switch cmd {
	case "create", "list", "revoke":
	default:
		return fmt.Errorf("keys: unknown command %q (want create, list or revoke)", cmd)
	}
	if err := parseConfig(fs, args, getenv, nil); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fs.Usage()
		}
		return err
	}
	d, err := openDatabase(ctx, *db, *databaseURL, true)
	if err != nil {
		return err
	}
	defer d.Close()

	switch cmd {
	case "create":
		if err := auth.CheckUser(*user); err != nil {
			return fmt.Errorf("keys create: --%v", err)
		}
		if *expiresIn < 0 {
			return errors.New("keys create: --expires-in must not be negative")
		}
		secret, k := auth.NewKey(*user, *name, *admin, false, time.Now(), *expiresIn)
		if err := d.CreateAPIKey(ctx, k); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "%s\n", secret)
		fmt.Fprintf(stderr, "created key %s for user %q%s; the secret above is shown only now\n", k.ID, k.User, map[bool]string{true: " (admin)"}[k.Admin])
	case "list":
		keys, err := d.ListAPIKeys(ctx, *user, 10_000)
		if err != nil {
			return err
		}
		tw := tabwriter.NewWriter(stdout, 2, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "ID\tUSER\tNAME\tPREFIX\tADMIN\tCREATED\tLAST USED\tSTATE")
		for _, k := range keys {
			state := "active"
			switch {
			case k.RevokedAt != nil:
				state = "revoked " + k.RevokedAt.Format(time.RFC3339)
			case !k.Usable(time.Now()):
				state = "expired"
			case k.ExpiresAt != nil:
				state = "expires " + k.ExpiresAt.Format(time.RFC3339)
			}
			used := "never"
			if k.LastUsedAt != nil {
				used = k.LastUsedAt.Format(time.RFC3339)
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s…\t%v\t%s\t%s\t%s\n", k.ID, k.User, k.Name, k.Prefix, k.Admin, k.CreatedAt.Format(time.RFC3339), used, state)
		}
		return tw.Flush()
	case "revoke":
		if fs.NArg() != 1 {
			return errors.New("keys revoke: want the key's ID: parley keys revoke ID")
		}
		k, err := d.RevokeAPIKey(ctx, fs.Arg(0), time.Now().UTC())
		if err != nil {
			return fmt.Errorf("keys revoke: %w", err)
		}
		fmt.Fprintf(stdout, "revoked %s (user %q)\n", k.ID, k.User)
	}
	return nil
}
